import sys

from tenantry.cli import main

sys.exit(main())
