"""The mixed-tenant SLO gate: Locust users per tenant traffic profile,
scenarios as load shapes, the per-tenant verdict and the HTML report.

    scenarios.py   what each scenario sends, stage by stage, from the Plan
    profiles.py    what one request of each traffic profile looks like
    records.py     one measured request, and the files a run leaves
    verdict.py     the per-tenant figures against the SLOs, and each scenario's checks
    report.py      the HTML report
    locustfile.py  the Locust side: user classes, the shape, the quitting listener
    target.py      what the gate runs against (a Target), and a deployed gateway as one
    run.py         `tenantry gate`: runs Locust headless against its targets and prints the verdict

It imports neither the local stack nor the Kubernetes program: the local
stack's Target lives in tenantry/local/target.py, and the CLI builds targets.
"""
