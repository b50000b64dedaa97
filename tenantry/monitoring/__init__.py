"""On-call: alert rules, Alertmanager routing and dashboards, rendered from the Plan for both outlets."""
