"""End-to-end benchmark on the real local cluster: kube-queue and Kueue side by side
(``make bench-e2e``; docs/benchmarks.md)."""
