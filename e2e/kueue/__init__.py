"""Kueue (sigs.k8s.io/kueue) beside kube-queue on the local e2e cluster, for the end-to-end
benchmark: built from a pinned Go wrapper module (build.py), run out of cluster as a child
process with its objects made by helpers (runner.py). See /work/shared/notes/kueue-side-by-side.md
for why each setting is what it is."""
