"""Runs IBM's network-config-analyzer on a connectivity table (tenantry/manifests/connectivity.py), in the analyser's
own environment (.venv-nca: it pins PyYAML, networkx and lxml apart from every other environment here). Run as a
script, it imports nothing of tenantry's:

    .venv-nca/bin/python tenantry/manifests/nca_runner.py JOB.json RESULTS.json

JOB.json names the cluster file (namespaces and workloads), the rendered NetworkPolicies, and each flow's own
NetworkPolicy that states it; RESULTS.json gets, per flow, whether the rendered policies permit it (a flow that must
pass, the analyser's permits query) or deny it (one that must not, its forbids query), with the analyser's words."""

from __future__ import annotations

import json
import sys


def main(job_file: str, results_file: str) -> int:
    from nca.NetworkConfig import NetworkConfigQuery
    from nca.NetworkConfig.ResourcesHandler import ResourcesHandler
    from nca.Utils.OutputConfiguration import OutputConfiguration

    with open(job_file, encoding="utf-8") as f:
        job = json.load(f)
    handler = ResourcesHandler()
    handler.set_global_peer_container([job["cluster"]], [job["cluster"]], None)
    rendered = handler.get_network_config([job["policies"]], None, None, None, "rendered")
    results = {}
    for flow in job["flows"]:
        stated = handler.get_network_config([flow["file"]], None, None, None, flow["name"])
        stated = stated.rebuild_by_base_config_resources(rendered)
        query = NetworkConfigQuery.PermitsQuery if flow["must_pass"] else NetworkConfigQuery.ForbidsQuery
        output = OutputConfiguration({"fullExplanation": True}, flow["name"])
        number, words, not_executed = query(stated, rendered, output).execute_and_compute_output_in_required_format()
        results[flow["name"]] = {"holds": number == 0 and not not_executed, "analyser": str(words).strip()}
    with open(results_file, "w", encoding="utf-8") as f:
        json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
