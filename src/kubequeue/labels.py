"""The annotation and label keys kube-queue reads from and writes onto users' objects.

One list, so what kube-queue may touch on a user's job is visible in one place (and documented
in README.md).
"""

from __future__ import annotations

__all__ = [
    "ADMITTED_AT",
    "BORROWING",
    "GAVE_UP",
    "HOSTNAME",
    "IGNORE",
    "PLACEMENT_GATE",
    "PLACEMENT_LABEL",
    "PREEMPTED_BY",
    "PREEMPTIBLE",
    "QUEUE_ANNOTATION",
    "QUEUE_LABEL",
    "REQUEUED_AT",
    "REQUEUES",
    "STOPPED",
    "SUSPEND_ANNOTATION",
    "TOPOLOGY_DOMAIN",
    "TOPOLOGY_PREFERRED",
    "TOPOLOGY_REQUIRED",
    "TOPOLOGY_SCOPE",
]

# Written by kube-queue on admission; its presence on a running job means "kube-queue admitted
# this", which is how a restarted controller finds the jobs whose capacity it must keep holding.
ADMITTED_AT = "kube-queue.io/admitted-at"
# Users set this to "true" (annotation or label) to keep kube-queue's hands off a suspended job.
IGNORE = "kube-queue.io/ignore"
# The suspend annotation understood by Kubeflow / Spark operator builds that support it.
SUSPEND_ANNOTATION = "scheduling.x-k8s.io/suspend"
# Users name the Queue a job waits in with this label (it takes precedence over Queue
# namespaceSelectors).
QUEUE_LABEL = "kube-queue.io/queue-name"
# Written on admission when the job went through a Queue object: the queue it was admitted into
# (its usage stays charged there, whatever happens to labels and selectors later) and whether it
# was admitted above its queue's guarantee ("true"), i.e. on quota that may be reclaimed.
QUEUE_ANNOTATION = "kube-queue.io/queue"
BORROWING = "kube-queue.io/borrowing"
# Written on a job kube-queue stopped to make room: which job it made room for
# ("<Kind>/<namespace>/<name>"); removed by the write that admits it again.
PREEMPTED_BY = "kube-queue.io/preempted-by"
# Users set this to "false" (annotation or label) so kube-queue never preempts the job.
PREEMPTIBLE = "kube-queue.io/preemptible"
# Written when kube-queue suspends an admitted job whose pods did not all start in time: how
# many times that happened, and when (the backoff before the next admission counts from it).
REQUEUES = "kube-queue.io/requeues"
REQUEUED_AT = "kube-queue.io/requeued-at"
# Written in the same write as every suspension kube-queue makes of a job it admitted:
# "<Why> <time>", Why being Preempted, Requeued (its pods did not start in time) or Unplaceable
# (its pods' room was taken). kube-queue never reads it back; it tells a user (or an auditor:
# e2e/chaos) that this suspension was kube-queue's, and why, even once the Event has expired.
STOPPED = "kube-queue.io/stopped"
# Written after the last allowed requeue: a hash of the job's spec. The job waits (GaveUp)
# until its spec differs from that (a user edited it) or it is re-created.
GAVE_UP = "kube-queue.io/gave-up"
# The scheduling gate the webhook puts on new pods of queued kinds; kube-queue removes it once it
# has added the node its plan chose to the pod's nodeSelector (capacity/pins.py). A gate, not a
# label: it is on the pod, not on the user's job.
PLACEMENT_GATE = "kube-queue.io/placement"
# Set by the same webhook on the pods it gates ("gated"), and by the ungating patch to what became
# of them ("pinned" or "unpinned"): kube-queue watches only unbound pods with this label, not
# every pending pod of the cluster (that watch cost the backlog benchmark half its rate).
PLACEMENT_LABEL = "kube-queue.io/placement"
# The node label a pinned pod's nodeSelector gets, naming the node the plan chose.
HOSTNAME = "kubernetes.io/hostname"
# Users ask for a gang's pods in one domain of a topology level (a node label) with these, on
# the job or on a pod template; Kueue's names for the same are accepted on either too.
TOPOLOGY_REQUIRED = ("kube-queue.io/topology-required", "kueue.x-k8s.io/podset-required-topology")
TOPOLOGY_PREFERRED = (
    "kube-queue.io/topology-preferred",
    "kueue.x-k8s.io/podset-preferred-topology",
)
# Users put this on the job, "job", for the whole job in one domain when any of its pod sets asks
# for a topology; by default ("pod-set") each pod set that asks gets a domain of its own.
TOPOLOGY_SCOPE = "kube-queue.io/topology-scope"
# Written on admission for a job placed in a topology domain: "<level>=<domain>" (one domain for
# the job, or the one pod set that asked), "<pod set>=<level>=<domain>,..." for several; removed
# by the admission of a job placed in none and by every suspension kube-queue makes.
TOPOLOGY_DOMAIN = "kube-queue.io/topology-domain"
