{{/* Names and labels shared by every object of the chart. */}}

{{- define "ssdcache.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The prefix of every object name; cluster-scoped objects carry it so that
two releases never collide. */}}
{{- define "ssdcache.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else if contains (include "ssdcache.name" .) .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name (include "ssdcache.name" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "ssdcache.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "ssdcache.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: ssdcache
{{- end -}}

{{/* Selector labels of one component: node, controller or bench. */}}
{{- define "ssdcache.selectorLabels" -}}
app.kubernetes.io/name: {{ include "ssdcache.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "ssdcache.image" -}}
{{- $tag := default .Chart.AppVersion .Values.image.tag -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository $tag -}}
{{- end -}}
{{- end -}}

{{- define "ssdcache.sidecarImage" -}}
{{- printf "%s:%s" .repository .tag -}}
{{- end -}}

{{- define "ssdcache.nodeServiceAccount" -}}
{{- default (printf "%s-node" (include "ssdcache.fullname" .)) .Values.node.serviceAccount.name -}}
{{- end -}}

{{- define "ssdcache.controllerServiceAccount" -}}
{{- default (printf "%s-controller" (include "ssdcache.fullname" .)) .Values.controller.serviceAccount.name -}}
{{- end -}}

{{- define "ssdcache.benchServiceAccount" -}}
{{- default (printf "%s-bench" (include "ssdcache.fullname" .)) .Values.bench.serviceAccount.name -}}
{{- end -}}

{{/* The ConfigMap the bench Job writes its report into. */}}
{{- define "ssdcache.benchReportConfigMap" -}}
{{- default (printf "%s-bench-report" (include "ssdcache.fullname" .)) .Values.bench.reportConfigMap -}}
{{- end -}}

{{/* The plugin's socket directory on the host, shared with kubelet. */}}
{{- define "ssdcache.pluginDir" -}}
{{- printf "%s/plugins/%s" (trimSuffix "/" .Values.kubeletDir) (include "ssdcache.driverName" .) -}}
{{- end -}}

{{- define "ssdcache.storageClassName" -}}
{{- default (printf "%s-cached" (include "ssdcache.fullname" .)) .Values.storageClass.name -}}
{{- end -}}

{{/* The CSI driver name is fixed: the controller, the CRD and every PV use it. */}}
{{- define "ssdcache.driverName" -}}
ssdcache.io
{{- end -}}

{{/* The node agent's Lease is this prefix and the node's name (ssdv1.AgentLeaseName). */}}
{{- define "ssdcache.agentLeasePrefix" -}}
ssdcache-node.
{{- end -}}
