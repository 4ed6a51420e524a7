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

{{/* A device selector as ssdcache-node's --origin-selector and --cache-selector read it. */}}
{{- define "ssdcache.selectorArg" -}}
{{- $parts := list -}}
{{- with .byId }}{{ $parts = append $parts (printf "by-id=%s" .) }}{{ end -}}
{{- with .model }}{{ $parts = append $parts (printf "model=%s" .) }}{{ end -}}
{{- with .minSize }}{{ $parts = append $parts (printf "min-size=%v" .) }}{{ end -}}
{{- with .maxSize }}{{ $parts = append $parts (printf "max-size=%v" .) }}{{ end -}}
{{- if hasKey . "rotational" }}{{ $parts = append $parts (printf "rotational=%t" .rotational) }}{{ end -}}
{{- join "," $parts -}}
{{- end -}}

{{/* Fails on node values no node could run with: the same volume group for
both pools, two groups of one name, or two groups whose node selectors are
the same (their DaemonSets would run two plugins on each of those nodes). */}}
{{- define "ssdcache.checkNodeGroups" -}}
{{- $node := .Values.node -}}
{{- if eq $node.originVG $node.cacheVG -}}
{{- fail (printf "node.originVG and node.cacheVG are both %q: the HDD and NVMe pools need volume groups of their own" $node.originVG) -}}
{{- end -}}
{{- $seen := dict -}}
{{- $selectors := dict -}}
{{- range $g := $node.nodeGroups -}}
{{- if hasKey $seen .name -}}
{{- fail (printf "node.nodeGroups: the name %q is used twice; each group is a DaemonSet named after it" .name) -}}
{{- end -}}
{{- $_ := set $seen .name true -}}
{{- $sel := merge (dict) (.nodeSelector | default dict) $node.nodeSelector | toJson -}}
{{- with get $selectors $sel -}}
{{- fail (printf "node.nodeGroups %s and %s select the same nodes (nodeSelector %s): a node would run two plugins fighting over its disks; give each group a nodeSelector of its own" . $g.name $sel) -}}
{{- end -}}
{{- $_ := set $selectors $sel .name -}}
{{- end -}}
{{- end -}}
