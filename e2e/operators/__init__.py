"""The real job operators (KubeRay, Kubeflow training-operator, mpi-operator, Argo, Spark) for
the e2e tests of kube-queue's job kinds: built from pinned Go modules, run as local processes."""
