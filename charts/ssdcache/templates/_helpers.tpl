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

{{/* A node selector as `kubectl get nodes -l` reads it: key=value,... sorted. */}}
{{- define "ssdcache.labelSelector" -}}
{{- $parts := list -}}
{{- range $k, $v := . }}{{ $parts = append $parts (printf "%s=%v" $k $v) }}{{ end -}}
{{- join "," $parts -}}
{{- end -}}

{{/* Fails on node values no node could run with: the same volume group for
both pools, or two groups of one name. The rest is checked per DaemonSet in
ssdcache.nodeSets. */}}
{{- define "ssdcache.checkNodeGroups" -}}
{{- $node := .Values.node -}}
{{- if eq $node.originVG $node.cacheVG -}}
{{- fail (printf "node.originVG and node.cacheVG are both %q: the HDD and NVMe pools need volume groups of their own" $node.originVG) -}}
{{- end -}}
{{- $seen := dict -}}
{{- range $node.nodeGroups -}}
{{- if hasKey $seen .name -}}
{{- fail (printf "node.nodeGroups: the name %q is used twice; each group is a DaemonSet named after it" .name) -}}
{{- end -}}
{{- $_ := set $seen .name true -}}
{{- end -}}
{{- end -}}

{{/* The node plugin's DaemonSets as JSON {"sets": [...], "overlaps": [...]}:
one for node's values, or one per node group (unset keys take node's). The
DaemonSets and NOTES.txt read this one list, so NOTES says what runs.
Fails on a set that can never run (no origin disks; a disk or selector in
both pools). Two plugins on one node would share its CSI socket and volume
groups: groups whose selectors certainly meet (the same, or one within the
other) are refused; groups that meet only on a node with both groups' labels
each get a required affinity NotIn the other's extra labels, so such a node
runs neither, and "overlaps" lets NOTES say how to find it. */}}
{{- define "ssdcache.nodeSets" -}}
{{- $fullname := include "ssdcache.fullname" . -}}
{{- $node := .Values.node -}}
{{- $nodeClass := $node.deviceClass -}}
{{- /* cacheClass is deviceClass's name before 0.2, still honoured (NOTES.txt
says so); the chart's values.yaml no longer has it, so only a user sets it.
A node.deviceClass at its default cannot be told from one the user gave, so
only one of another value is refused beside it. */ -}}
{{- if hasKey $node "cacheClass" -}}
{{- if and (ne $node.deviceClass "nvme") (ne $node.deviceClass $node.cacheClass) -}}
{{- fail (printf "node.deviceClass is %q and node.cacheClass, its deprecated name, is %q: set node.deviceClass alone" $node.deviceClass $node.cacheClass) -}}
{{- end -}}
{{- $nodeClass = $node.cacheClass -}}
{{- end -}}
{{- $sets := list -}}
{{- range $group := $node.nodeGroups | default (list (dict)) -}}
{{- $where := ternary "node" (printf "node.nodeGroups %s" $group.name) (empty $group.name) -}}
{{- $s := dict "group" ($group.name | default "") "where" $where "excludes" list
  "name" (ternary (printf "%s-node" $fullname) (printf "%s-node-%s" $fullname $group.name) (empty $group.name))
  "nodeSelector" (merge (dict) ($group.nodeSelector | default dict) ($node.nodeSelector | default dict)) -}}
{{- $_ := set $s "labelSelector" (include "ssdcache.labelSelector" $s.nodeSelector) -}}
{{- range $key := list "originDevices" "cacheDevices" "adoptDevices" -}}
{{- $_ := set $s $key ((ternary (get $group $key) (get $node $key) (hasKey $group $key)) | default list) -}}
{{- end -}}
{{- range $key := list "originSelector" "cacheSelector" -}}
{{- $_ := set $s (printf "%sArg" $key) (include "ssdcache.selectorArg" ((ternary (get $group $key) (get $node $key) (hasKey $group $key)) | default dict)) -}}
{{- end -}}
{{- $class := ternary $group.cacheClass $nodeClass (hasKey $group "cacheClass") -}}
{{- if hasKey $group "deviceClass" -}}
{{- if and (hasKey $group "cacheClass") (ne $group.deviceClass $group.cacheClass) -}}
{{- fail (printf "%s: deviceClass is %q and cacheClass, its deprecated name, is %q: set deviceClass alone" $where $group.deviceClass $group.cacheClass) -}}
{{- end -}}
{{- $class = $group.deviceClass -}}
{{- end -}}
{{- $_ := set $s "deviceClass" $class -}}
{{- if not (or $s.originDevices $s.originSelectorArg) -}}
{{- if $group.name -}}
{{- fail (printf "%s: no origin devices: originDevices is [] and originSelector is {} in the group and under node; set either (a list of /dev/disk/by-id/<id> paths, or a selector of byId, model, minSize, maxSize, rotational): the plugin refuses to start without an origin pool" $where) -}}
{{- else -}}
{{- fail (printf "node.originDevices is %s and node.originSelector is %s, and node.nodeGroups is empty: the node plugin needs the HDDs of its origin volume group and would exit on every node. Set node.originSelector (keys byId, model, minSize, maxSize, rotational; e.g. --set node.originSelector.byId='/dev/disk/by-id/ata-ST4000NM*'), node.originDevices (a list of /dev/disk/by-id/<id> paths) or node.nodeGroups (each with a nodeSelector and its devices)" (toJson ($node.originDevices | default list)) (toJson ($node.originSelector | default dict))) -}}
{{- end -}}
{{- end -}}
{{- range $s.originDevices -}}
{{- if has . $s.cacheDevices -}}
{{- fail (printf "%s: %s is in both originDevices and cacheDevices; a disk may be in one pool only" $where .) -}}
{{- end -}}
{{- end -}}
{{- if and $s.originSelectorArg (eq $s.originSelectorArg $s.cacheSelectorArg) -}}
{{- fail (printf "%s: originSelector and cacheSelector are the same (%s): every disk one picks the other picks too, and a disk may be in one pool only (the node would never be ready); tell them apart, e.g. rotational: true for the HDDs and false for the NVMe, or byId/model globs" $where $s.originSelectorArg) -}}
{{- end -}}
{{- range $s.adoptDevices -}}
{{- if not (or (has . $s.originDevices) (has . $s.cacheDevices) $s.originSelectorArg $s.cacheSelectorArg) -}}
{{- fail (printf "%s: adoptDevices lists %s, which is in neither originDevices nor cacheDevices, and no selector could pick it" $where .) -}}
{{- end -}}
{{- end -}}
{{- $sets = append $sets $s -}}
{{- end -}}
{{- $overlaps := list -}}
{{- range $i, $a := $sets -}}
{{- range $j, $b := $sets -}}
{{- if lt $i $j -}}
{{- $conflict := false -}}
{{- $onlyA := dict -}}
{{- $onlyB := dict -}}
{{- range $k, $v := $a.nodeSelector -}}
{{- if not (hasKey $b.nodeSelector $k) -}}
{{- $_ := set $onlyA $k $v -}}
{{- else if ne (toString $v) (toString (get $b.nodeSelector $k)) -}}
{{- $conflict = true -}}
{{- end -}}
{{- end -}}
{{- range $k, $v := $b.nodeSelector -}}
{{- if not (hasKey $a.nodeSelector $k) }}{{ $_ := set $onlyB $k $v }}{{ end -}}
{{- end -}}
{{- if $conflict -}}
{{- /* One label with other values: no node carries both. */ -}}
{{- else if and (not $onlyA) (not $onlyB) -}}
{{- fail (printf "node.nodeGroups %s and %s select the same nodes (nodeSelector %s): each node would run two plugins sharing its CSI socket and its volume groups; give each group a nodeSelector of its own, e.g. ssdcache.io/group: <group name>" $a.group $b.group $a.labelSelector) -}}
{{- else if or (not $onlyA) (not $onlyB) -}}
{{- $wide := ternary $a $b (not $onlyA) -}}
{{- $narrow := ternary $b $a (not $onlyA) -}}
{{- $nothing := ternary " (its nodeSelector adds nothing to node.nodeSelector)" "" (eq $wide.labelSelector (include "ssdcache.labelSelector" ($node.nodeSelector | default dict))) -}}
{{- fail (printf "node.nodeGroups %s (nodeSelector %s) selects every node that %s (nodeSelector %s) selects%s: those nodes would run two plugins sharing their CSI socket and their volume groups; give %s a label that %s's nodes lack, e.g. one key with a value per group (ssdcache.io/group: %s and ssdcache.io/group: %s)" $wide.group $wide.labelSelector $narrow.group $narrow.labelSelector $nothing $wide.group $narrow.group $wide.group $narrow.group) -}}
{{- else -}}
{{- $_ := set $a "excludes" (append $a.excludes (dict "group" $b.group "labels" $onlyB)) -}}
{{- $_ := set $b "excludes" (append $b.excludes (dict "group" $a.group "labels" $onlyA)) -}}
{{- $overlaps = append $overlaps (dict "groups" (list $a.group $b.group) "labelSelector" (include "ssdcache.labelSelector" (merge (dict) $a.nodeSelector $b.nodeSelector))) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- range $s := $sets -}}
{{- if $s.excludes -}}
{{- /* node.affinity's required terms are ORed; each excluded group ANDs
in "one of its own labels differs", so every term is paired with each. */ -}}
{{- $aff := deepCopy ($node.affinity | default dict) -}}
{{- $na := get $aff "nodeAffinity" | default dict -}}
{{- $req := get $na "requiredDuringSchedulingIgnoredDuringExecution" | default dict -}}
{{- $terms := get $req "nodeSelectorTerms" | default (list (dict)) -}}
{{- range $e := $s.excludes -}}
{{- $next := list -}}
{{- range $t := $terms -}}
{{- range $k, $v := $e.labels -}}
{{- $nt := deepCopy $t -}}
{{- $_ := set $nt "matchExpressions" (append (get $nt "matchExpressions" | default list) (dict "key" $k "operator" "NotIn" "values" (list (toString $v)))) -}}
{{- $next = append $next $nt -}}
{{- end -}}
{{- end -}}
{{- $terms = $next -}}
{{- end -}}
{{- if gt (len $terms) 64 -}}
{{- fail (printf "%s: keeping off the nodes of the groups it may share nodes with takes %d node affinity terms (at most 64); give each group one label of its own, e.g. ssdcache.io/group: <group name>" $s.where (len $terms)) -}}
{{- end -}}
{{- $_ := set $req "nodeSelectorTerms" $terms -}}
{{- $_ := set $na "requiredDuringSchedulingIgnoredDuringExecution" $req -}}
{{- $_ := set $aff "nodeAffinity" $na -}}
{{- $_ := set $s "affinity" $aff -}}
{{- end -}}
{{- end -}}
{{- toJson (dict "sets" $sets "overlaps" $overlaps) -}}
{{- end -}}

{{/*
The ssdcache.io/cache-mode the chart's StorageClass carries: storageClass.cacheMode
in the CRD's spelling (ReadCache, None), except that a class already in the
cluster with the same mode in another spelling (readcache, written by a release
before 0.2) keeps it: a StorageClass's parameters cannot change, and the upgrade
would fail on it. Recreate the class to take the new spelling.
*/}}
{{- define "ssdcache.storageClassCacheMode" -}}
{{- $mode := ternary "ReadCache" "None" (eq (lower .Values.storageClass.cacheMode) "readcache") -}}
{{- $live := lookup "storage.k8s.io/v1" "StorageClass" "" (include "ssdcache.storageClassName" .) -}}
{{- $liveMode := get (($live).parameters | default dict) "ssdcache.io/cache-mode" -}}
{{- if and $liveMode (eq (lower $liveMode) (lower $mode)) -}}
{{- $mode = $liveMode -}}
{{- end -}}
{{- $mode -}}
{{- end -}}

{{/* The env of ssdcache-node and ssdcache-controller that gives the Go runtime
a soft memory limit (pkg/memlimit): the container's memory limit through the
downward API, in bytes, and the share of it to use, which the binary applies
(resourceFieldRef cannot take a share: its divisor is 1, 1Ki, 1Mi and so on).
A ratio of 0 renders nothing: Go's default, no soft limit. */}}
{{- define "ssdcache.memoryLimitEnv" -}}
{{- if gt (float64 .) 0.0 -}}
- name: SSDCACHE_MEMORY_LIMIT
  valueFrom:
    resourceFieldRef:
      resource: limits.memory
      divisor: "1"
- name: SSDCACHE_MEMORY_LIMIT_RATIO
  value: {{ . | quote }}
{{- end }}
{{- end -}}
