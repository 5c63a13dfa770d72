{{- define "kube-queue.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "kube-queue.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "kube-queue.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "kube-queue.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "kube-queue.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The --kinds list: Job always, each enabled extension after it. */}}
{{- define "kube-queue.kinds" -}}
{{- $kinds := list "job" -}}
{{- $ext := .Values.extension -}}
{{- if $ext.tf.enable }}{{ $kinds = append $kinds "tfjob" }}{{ end -}}
{{- if $ext.pytorch.enable }}{{ $kinds = append $kinds "pytorchjob" }}{{ end -}}
{{- if $ext.mpi.enable }}{{ $kinds = append $kinds "mpijob" }}{{ end -}}
{{- if $ext.spark.enable }}{{ $kinds = append $kinds "sparkapplication" }}{{ end -}}
{{- if $ext.ray.enable }}{{ $kinds = append $kinds "rayjob" }}{{ end -}}
{{- if $ext.argo.enable }}{{ $kinds = append $kinds "workflow" }}{{ end -}}
{{- join "," $kinds -}}
{{- end -}}

{{/* Resources (group -> plural list) of enabled extension kinds that hold jobs by suspend. */}}
{{- define "kube-queue.suspendRules" -}}
{{- $ext := .Values.extension -}}
{{- $kubeflow := list -}}
{{- if $ext.tf.enable }}{{ $kubeflow = append $kubeflow "tfjobs" }}{{ end -}}
{{- if $ext.pytorch.enable }}{{ $kubeflow = append $kubeflow "pytorchjobs" }}{{ end -}}
{{- if $ext.mpi.enable }}{{ $kubeflow = append $kubeflow "mpijobs" }}{{ end -}}
{{- if $kubeflow }}
- apiGroups: ["kubeflow.org"]
  apiVersions: ["*"]
  operations: ["CREATE"]
  resources: {{ toJson $kubeflow }}
{{- end }}
{{- if $ext.spark.enable }}
- apiGroups: ["sparkoperator.k8s.io"]
  apiVersions: ["*"]
  operations: ["CREATE"]
  resources: ["sparkapplications"]
{{- end }}
{{- if $ext.ray.enable }}
- apiGroups: ["ray.io"]
  apiVersions: ["*"]
  operations: ["CREATE"]
  resources: ["rayjobs"]
{{- end }}
{{- end -}}

{{/* "true" when the webhook has something to do: enabled, and native-suspend has kinds or
auto-queue is on. Empty otherwise (no Secret, Service, configuration or server). */}}
{{/* The label every pod of each queued kind carries: the pod webhook's objectSelectors. */}}
{{- define "kube-queue.podLabels" -}}
{{- $ext := .Values.extension -}}
{{- $labels := list "batch.kubernetes.io/job-name" -}}
{{- if or $ext.tf.enable $ext.pytorch.enable $ext.mpi.enable }}{{ $labels = append $labels "training.kubeflow.org/job-name" }}{{ end -}}
{{- if $ext.ray.enable }}{{ $labels = append $labels "ray.io/cluster" }}{{ end -}}
{{- if $ext.spark.enable }}{{ $labels = append $labels "sparkoperator.k8s.io/app-name" }}{{ end -}}
{{- if $ext.argo.enable }}{{ $labels = append $labels "workflows.argoproj.io/workflow" }}{{ end -}}
{{- toJson $labels -}}
{{- end -}}

{{- define "kube-queue.webhookNeeded" -}}
{{- if .Values.webhook.enabled -}}
{{- if or .Values.webhook.pinPlacement .Values.webhook.autoQueue.enabled (and .Values.webhook.nativeSuspend (trim (include "kube-queue.suspendRules" .))) -}}
true
{{- end -}}
{{- end -}}
{{- end -}}
