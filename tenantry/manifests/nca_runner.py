"""Runs IBM's network-config-analyzer on a connectivity table (tenantry/manifests/connectivity.py), in the analyser's
own environment (.venv-nca: it pins PyYAML, networkx and lxml apart from every other environment here). Run as a
script, it imports nothing of tenantry's:

    .venv-nca/bin/python tenantry/manifests/nca_runner.py JOB.json RESULTS.json

JOB.json names the cluster file (namespaces and workloads), the rendered NetworkPolicies, and the flows in groups,
each flow's own NetworkPolicy stating it; RESULTS.json gets, per flow, whether the rendered policies permit it (a
flow that must pass, the analyser's permits query) or deny it (one that must not, its forbids query), with the
analyser's words."""

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

    def decide(name: str, files: list[str], must_pass: bool) -> tuple[bool, str]:
        stated = handler.get_network_config(files, None, None, None, name)
        stated = stated.rebuild_by_base_config_resources(rendered)
        query = NetworkConfigQuery.PermitsQuery if must_pass else NetworkConfigQuery.ForbidsQuery
        output = OutputConfiguration({"fullExplanation": True}, name)
        number, words, not_executed = query(stated, rendered, output).execute_and_compute_output_in_required_format()
        return number == 0 and not not_executed, str(words).strip()

    results = {}
    for group in job["groups"]:
        # The group's flows at once: each states the same kind of rule (all egress, or all ingress), so together
        # they allow exactly the union of what each allows. Asked one by one only when the group fails.
        holds, words = decide(group["name"], [flow["file"] for flow in group["flows"]], group["must_pass"])
        for flow in group["flows"]:
            results[flow["name"]] = {"holds": True, "analyser": words} if holds else dict(
                zip(("holds", "analyser"), decide(flow["name"], [flow["file"]], group["must_pass"])))
    with open(results_file, "w", encoding="utf-8") as f:
        json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
