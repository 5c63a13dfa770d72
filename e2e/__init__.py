"""End-to-end tests against a real Kubernetes control plane (see e2e/cluster)."""
