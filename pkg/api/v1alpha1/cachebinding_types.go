package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// CacheMode is what the cache of a binding does.
// +kubebuilder:validation:Enum=ReadCache;Paused
type CacheMode string

const (
	// ModeReadCache caches reads; writes complete only once they are on the origin
	// (dm-cache writethrough).
	ModeReadCache CacheMode = "ReadCache"
	// ModePaused serves every read and write from the origin and keeps the cache's
	// space on the SSD and its hot set; resuming fills a new cache from the hot set.
	ModePaused CacheMode = "Paused"
)

// WarmupPolicy says how a new cache is filled before reads arrive.
// +kubebuilder:validation:Enum=None;HotSet
type WarmupPolicy string

const (
	// WarmupNone starts every new cache empty; it fills as reads miss.
	WarmupNone WarmupPolicy = "None"
	// WarmupHotSet fills a new cache (after a restage, a node plugin restart,
	// a reboot, a resize) with the origin blocks the volume's cache held when
	// it last went, copied from the origin, before the cache goes live.
	WarmupHotSet WarmupPolicy = "HotSet"
)

// WarmupPolicies are the allowed warm-up policies.
var WarmupPolicies = []WarmupPolicy{WarmupHotSet, WarmupNone}

// CacheBindingPhase is a one-word summary of a binding's state; the conditions
// carry the detail.
// +kubebuilder:validation:Enum=Pending;Admitted;Attached;Paused;Degraded;Detaching
type CacheBindingPhase string

const (
	// PhasePending: not admitted to a node yet (see the Pending condition).
	PhasePending CacheBindingPhase = "Pending"
	// PhaseAdmitted: a node and cache capacity were chosen; the node agent has not
	// attached the cache yet.
	PhaseAdmitted CacheBindingPhase = "Admitted"
	// PhaseAttached: the cache is attached and serving reads.
	PhaseAttached CacheBindingPhase = "Attached"
	// PhasePaused: the volume serves from its origin; the cache's space and hot set are kept.
	PhasePaused CacheBindingPhase = "Paused"
	// PhaseDegraded: the cache device failed and was dropped; reads go to the origin.
	PhaseDegraded CacheBindingPhase = "Degraded"
	// PhaseDetaching: the binding is being deleted and the cache is being detached.
	PhaseDetaching CacheBindingPhase = "Detaching"
)

// deviceClass's own rule runs only when the old and the new spec both have
// the field, so this one, on the spec, which every update has, refuses adding
// or removing it: admission charges the node's capacity of the class, and the
// node agent carves the cache from that class's pool. (Apart from the type's
// doc comment, so that it stays out of the CRD's description.)
// +kubebuilder:validation:XValidation:rule="has(self.deviceClass) == has(oldSelf.deviceClass)",fieldPath=".deviceClass",reason="FieldValueForbidden",message="deviceClass is immutable: it cannot be added or removed once the binding exists; delete this binding and create another to use a different class"

// CacheBindingSpec is the cache a user asks for in front of one PVC.
type CacheBindingSpec struct {
	// pvcName names the PersistentVolumeClaim, in the binding's namespace, whose volume
	// gets the cache. It cannot be changed; create another binding instead.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$')",message="pvcName must be a lowercase DNS subdomain name (a-z, 0-9, '-' and '.', starting and ending with a letter or digit)"
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="pvcName is immutable; delete this binding and create another to cache a different PVC"
	PVCName string `json:"pvcName"`

	// size of the cache: a quantity of bytes of at least 16Mi (such as 10Gi; written
	// without a fraction, so 1536Mi rather than 1.5Gi), or a whole percentage of the
	// volume's size from 1% to 100% (such as 10%). It may be
	// changed while the cache is attached; the node agent resizes it online.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=32
	// Each rule skips an exponent of three or more digits, which the first refuses:
	// the API server would misread or take minutes to build such a quantity.
	// +kubebuilder:validation:XValidation:rule="self.endsWith('%') || !self.matches('[eE][-+]?[0-9]{3,}$')",message="size: an exponent may have at most two digits"
	// +kubebuilder:validation:XValidation:rule="self.endsWith('%') || self.matches('[eE][-+]?[0-9]{3,}$') || isQuantity(self)",message="size must be a quantity such as 10Gi or a percentage of the volume such as 10%"
	// +kubebuilder:validation:XValidation:rule="!self.endsWith('%') || self.matches('^([1-9][0-9]?|100)%$')",message="size as a percentage must be a whole number from 1% to 100%"
	// +kubebuilder:validation:XValidation:rule="self.endsWith('%') || self.matches('[eE][-+]?[0-9]{3,}$') || !isQuantity(self) || quantity(self).isInteger()",message="size must be a whole number of bytes below 2^63, written without a fraction (1536Mi, not 1.5Gi)"
	// +kubebuilder:validation:XValidation:rule="self.endsWith('%') || self.matches('[eE][-+]?[0-9]{3,}$') || !isQuantity(self) || !quantity(self).isInteger() || quantity(self).compareTo(quantity('16Mi')) >= 0",message="size must be at least 16Mi, room for dm-cache metadata and data blocks"
	Size string `json:"size"`

	// mode is ReadCache (reads are cached, writes go through to the origin) or Paused
	// (every I/O goes to the origin; the cache's space and hot set are kept, and
	// ReadCache again fills a new cache from the hot set).
	// +optional
	// +kubebuilder:default=ReadCache
	Mode CacheMode `json:"mode,omitempty"`

	// deviceClass names the class of cache devices the cache is carved from (a
	// node's --device-class, the StorageClass parameter ssdcache.io/device-class);
	// empty means the node's default class. It cannot be added, changed or
	// removed once the binding exists.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="deviceClass is immutable; delete this binding and create another to use a different class"
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	DeviceClass string `json:"deviceClass,omitempty"`

	// warmup is how a new cache is filled: HotSet (the default) copies the blocks
	// the volume's cache held when it last went, at most the cache's size, from the
	// origin before the cache goes live; None starts empty and fills on read misses.
	// +optional
	// +kubebuilder:default=HotSet
	Warmup WarmupPolicy `json:"warmup,omitempty"`

	// warmupLimit bounds the bytes one warm-up copies from the origin: a quantity
	// of whole bytes such as 2Gi, written without a fraction. A larger hot set is
	// cut in origin order and the rest fills on reads. Empty means the cache's
	// size; 0 is the same as warmup None.
	// +optional
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="!self.matches('[eE][-+]?[0-9]{3,}$')",message="warmupLimit: an exponent may have at most two digits"
	// +kubebuilder:validation:XValidation:rule="self.matches('[eE][-+]?[0-9]{3,}$') || (isQuantity(self) && quantity(self).isInteger() && quantity(self).compareTo(quantity('0')) >= 0)",message="warmupLimit must be a whole number of bytes such as 2Gi, written without a fraction (1536Mi, not 1.5Gi)"
	WarmupLimit string `json:"warmupLimit,omitempty"`

	// preloadPaths names files and directories of the volume's filesystem, relative
	// to its root (models/7b.bin, db/index), whose data the node agent copies into
	// the cache once it is attached, ahead of the first read, as far as free cache
	// blocks allow; a directory stands for every file beneath it. Symlinks resolve
	// inside the volume. The paths are preloaded once per spec change (a failed
	// preload is retried); status.lastPreload tells what was copied. Filesystem
	// volumes only; the blocks stay in the volume's hot set like any other.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=1024
	// +kubebuilder:validation:XValidation:rule="self.all(p, !p.startsWith('/') && !p.matches('(^|/)[.][.](/|$)'))",message="preloadPaths: each path is relative to the volume's root (no leading /) and has no .. component"
	PreloadPaths []string `json:"preloadPaths,omitempty"`
}

// CacheFigures are dm-cache's counters for the binding's cache, as last sampled by
// the node agent. Counters are cumulative since the cache was attached.
type CacheFigures struct {
	// blockSizeBytes is the size of one cache block.
	// +optional
	// +kubebuilder:validation:Minimum=0
	BlockSizeBytes int64 `json:"blockSizeBytes,omitempty"`
	// usedBlocks is the number of cache blocks holding data.
	// +optional
	// +kubebuilder:validation:Minimum=0
	UsedBlocks int64 `json:"usedBlocks,omitempty"`
	// totalBlocks is the number of cache blocks.
	// +optional
	// +kubebuilder:validation:Minimum=0
	TotalBlocks int64 `json:"totalBlocks,omitempty"`
	// readHits counts reads served from the cache.
	// +optional
	// +kubebuilder:validation:Minimum=0
	ReadHits int64 `json:"readHits,omitempty"`
	// readMisses counts reads served from the origin.
	// +optional
	// +kubebuilder:validation:Minimum=0
	ReadMisses int64 `json:"readMisses,omitempty"`
	// hitRatio is readHits / (readHits + readMisses) as a percentage with one decimal,
	// such as "87.5%" (a string, not a float, so that the CRD stays portable); see
	// FormatHitRatio.
	// +optional
	// +kubebuilder:validation:Pattern=`^(100\.0|[1-9]?[0-9]\.[0-9])%$`
	HitRatio string `json:"hitRatio,omitempty"`
	// recentHitRatio is the read hit ratio over the node agent's last few samples
	// (about the last minute, see RecentHitWindow), formatted as hitRatio: unlike
	// hitRatio, which counts since the cache was attached, it shows a converging
	// cache's current hit rate. Empty until two samples exist or when no reads
	// came in the window.
	// +optional
	// +kubebuilder:validation:Pattern=`^(100\.0|[1-9]?[0-9]\.[0-9])%$`
	RecentHitRatio string `json:"recentHitRatio,omitempty"`
	// promotions counts blocks copied from the origin into the cache.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Promotions int64 `json:"promotions,omitempty"`
	// demotions counts blocks dropped from the cache to make room.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Demotions int64 `json:"demotions,omitempty"`
	// lastSampleTime is when the node agent read these figures from dm-cache.
	// +optional
	LastSampleTime *metav1.Time `json:"lastSampleTime,omitempty"`
}

// CacheBindingStatus is written by the controller up to admission (nodeName,
// volumeHandle, resolvedSizeBytes, the Pending condition, phases Pending and
// Admitted) and by the node agent of status.nodeName afterwards (Ready, Degraded,
// WarmingUp, CacheRetried, figures, later phases).
type CacheBindingStatus struct {
	// observedGeneration is the metadata.generation the status was written for.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// phase summarises the state; see the conditions for the detail.
	// +optional
	Phase CacheBindingPhase `json:"phase,omitempty"`
	// nodeName is the node the binding was admitted to; empty until admitted.
	// +optional
	NodeName string `json:"nodeName,omitempty"`
	// volumeHandle is the CSI volume handle of the PVC's volume; set on admission.
	// +optional
	VolumeHandle string `json:"volumeHandle,omitempty"`
	// resolvedSizeBytes is spec.size in bytes for this volume (a percentage resolved
	// against the volume's capacity); it is what the node's capacity is charged.
	// +optional
	// +kubebuilder:validation:Minimum=0
	ResolvedSizeBytes int64 `json:"resolvedSizeBytes,omitempty"`
	// conditions: Ready (the cache serves reads as the spec asks), Pending (the
	// binding waits for admission to a node; the reason says what for),
	// WarmingUp (a new cache is being filled from the volume's hot set),
	// Degraded (the cache device failed and the cache was dropped; reads go to
	// the origin) and CacheRetried (the one automatic retry of a Degraded
	// binding in this generation of the spec, made once the failed device's
	// PV was removed from the node's cache pool, was spent; reason Attaching,
	// Attached or AttachFailed; a spec change allows another).
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// cache holds the last sampled dm-cache figures.
	// +optional
	Cache *CacheFigures `json:"cache,omitempty"`
	// lastWarmup is the last filling of the cache from the volume's hot set.
	// +optional
	LastWarmup *WarmupRecord `json:"lastWarmup,omitempty"`
	// lastPreload is the last preload of spec.preloadPaths.
	// +optional
	LastPreload *PreloadRecord `json:"lastPreload,omitempty"`
}

// PreloadRecord describes one preload of a binding's spec.preloadPaths.
type PreloadRecord struct {
	// observedGeneration is the metadata.generation whose preloadPaths these are.
	// +required
	// +kubebuilder:validation:Minimum=0
	ObservedGeneration int64 `json:"observedGeneration"`
	// nodeName is the node whose cache the paths were preloaded into: a binding
	// admitted to another node preloads there again.
	// +optional
	NodeName string `json:"nodeName,omitempty"`
	// files were found under the paths, holding fileBytes of data.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Files int64 `json:"files,omitempty"`
	// +optional
	// +kubebuilder:validation:Minimum=0
	FileBytes int64 `json:"fileBytes,omitempty"`
	// bytes were copied from the origin into the cache, in whole cache blocks.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Bytes int64 `json:"bytes,omitempty"`
	// heldBytes were in the cache already.
	// +optional
	// +kubebuilder:validation:Minimum=0
	HeldBytes int64 `json:"heldBytes,omitempty"`
	// leftBytes found no free cache block: the cache is full of other data, which
	// smq replaces by use.
	// +optional
	// +kubebuilder:validation:Minimum=0
	LeftBytes int64 `json:"leftBytes,omitempty"`
	// missingPaths are the preloadPaths that do not exist in the volume.
	// +optional
	// +listType=atomic
	MissingPaths []string `json:"missingPaths,omitempty"`
	// error is why the preload failed, empty when it did not; a failed preload is
	// tried again.
	// +optional
	Error string `json:"error,omitempty"`
	// inProgress: the preload goes on at the agent's next visit, in a second. It
	// copies up to 2 GiB a visit (two batches), so that the volume is not held longer;
	// bytes and duration count every visit so far.
	// +optional
	InProgress bool `json:"inProgress,omitempty"`
	// duration is how long the preload took.
	// +required
	Duration metav1.Duration `json:"duration"`
	// completionTime is when it ended.
	// +required
	CompletionTime metav1.Time `json:"completionTime"`
}

// WarmupRecord describes one filling of a new cache from its volume's hot set.
type WarmupRecord struct {
	// bytes were copied from the origin and mapped in the cache.
	// +required
	// +kubebuilder:validation:Minimum=0
	Bytes int64 `json:"bytes"`
	// blocks is bytes in cache blocks.
	// +required
	// +kubebuilder:validation:Minimum=0
	Blocks int64 `json:"blocks"`
	// writtenBlocks were copied but written by the application during the copy,
	// or held by a paused cache but written while it was paused, and left out
	// of the cache.
	// +optional
	// +kubebuilder:validation:Minimum=0
	WrittenBlocks int64 `json:"writtenBlocks,omitempty"`
	// keptBlocks were held by the cache when it was paused and are mapped
	// again on resume without being read from the origin.
	// +optional
	// +kubebuilder:validation:Minimum=0
	KeptBlocks int64 `json:"keptBlocks,omitempty"`
	// duration is the time from the start of the copy to the cache going live.
	// +required
	Duration metav1.Duration `json:"duration"`
	// completionTime is when the cache went live, filled.
	// +required
	CompletionTime metav1.Time `json:"completionTime"`
}

// CacheBinding puts a node-local SSD read cache in front of the volume of one PVC.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=cb;cbind,categories=ssdcache
// +kubebuilder:printcolumn:name="PVC",type=string,JSONPath=`.spec.pvcName`
// +kubebuilder:printcolumn:name="NODE",type=string,JSONPath=`.status.nodeName`
// +kubebuilder:printcolumn:name="SIZE",type=string,JSONPath=`.spec.size`
// +kubebuilder:printcolumn:name="MODE",type=string,JSONPath=`.spec.mode`
// +kubebuilder:printcolumn:name="PHASE",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="HIT%",type=string,JSONPath=`.status.cache.recentHitRatio`
// +kubebuilder:printcolumn:name="READY",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="REASON",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="AGE",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="TOTAL-HIT%",type=string,JSONPath=`.status.cache.hitRatio`,priority=1
// +kubebuilder:printcolumn:name="BYTES",type=integer,JSONPath=`.status.resolvedSizeBytes`,priority=1
type CacheBinding struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec CacheBindingSpec `json:"spec"`
	// +optional
	Status CacheBindingStatus `json:"status,omitempty"`
}

// CacheBindingList is a list of CacheBindings.
//
// +kubebuilder:object:root=true
type CacheBindingList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []CacheBinding `json:"items"`
}

func init() {
	SchemeBuilder.Register(&CacheBinding{}, &CacheBindingList{})
}
