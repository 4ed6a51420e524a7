package v1alpha1

import "strings"

// Names shared by the controller, the node agent and the CSI driver. They live here
// because this is the only package the others share as data.
const (
	// DriverName is the CSI driver name; only volumes of this driver can be cached.
	DriverName = "ssdcache.io"

	// TopologyKeyNode is the CSI topology key whose value names the node holding a
	// volume; the controller and the node agent read it from the PV's required
	// node affinity, with PinnedNode.
	TopologyKeyNode = "topology.ssdcache.io/node"

	// Finalizer keeps a CacheBinding until its cache is detached. The node agent on
	// status.nodeName removes it after detaching; the controller removes it only when
	// the binding was never admitted or its Node object no longer exists.
	Finalizer = "ssdcache.io/cache-detach"

	// AnnotationCachePoolBytes is set on each Node by its node agent: the size of its
	// cache pool (the NVMe volume group), as a decimal integer. Admission charges each
	// cache admitted to the node what LVM allocates for it (cachesize.Footprint of its
	// size, AnnotationCacheExtentBytes and AnnotationCacheBlockBytes: its data and
	// metadata LVs in whole extents) against it. A node without it has an agent that
	// predates it, and is admitted against AnnotationCacheCapacityBytes instead.
	AnnotationCachePoolBytes = "ssdcache.io/cache-pool-bytes"

	// AnnotationCacheExtentBytes is set on each Node by its node agent beside the pool
	// size: the pool's LVM extent size, which lvcreate rounds every LV up to.
	AnnotationCacheExtentBytes = "ssdcache.io/cache-extent-bytes"

	// AnnotationCacheBlockBytes is set on each Node by its node agent beside the pool
	// size: the cache block size of new caches (its --cache-block-size), before the
	// doubling that keeps a large cache within a million blocks. A cache's metadata
	// LV takes 44 bytes a block.
	AnnotationCacheBlockBytes = "ssdcache.io/cache-block-bytes"

	// AnnotationCacheCapacityBytes is set on each Node by its node agent: the bytes of
	// cache (NVMe) space the node can hand out, as a decimal integer: the pool less a
	// reserve for metadata LVs. Admission charges each cache its size against it on a
	// node that does not report AnnotationCachePoolBytes (an older agent); agents keep
	// it for controllers that predate the pool annotations.
	AnnotationCacheCapacityBytes = "ssdcache.io/cache-capacity-bytes"

	// AnnotationCacheFreeBytes is set on each Node by its node agent beside the
	// capacity: the bytes its cache pool has not allocated, as LVM last read
	// them. It is for operators (capacity minus the admitted bindings should
	// roughly match it); admission uses the capacity.
	AnnotationCacheFreeBytes = "ssdcache.io/cache-free-bytes"

	// AnnotationDeviceClass is set on each Node by its node agent beside the
	// capacity: the device class of its cache pool ("" when it has none). The
	// controller admits a binding only to a node of the binding's class.
	AnnotationDeviceClass = "ssdcache.io/device-class"

	// AnnotationDeviceClassDeprecated is AnnotationDeviceClass's name before
	// 0.2. Agents and controllers of both releases run side by side during an
	// upgrade, so agents write both and the controller reads this one only on a
	// node without AnnotationDeviceClass (an older agent). Drop it once no
	// supported release reads it.
	AnnotationDeviceClassDeprecated = "ssdcache.io/cache-device-class"

	// AnnotationNamespaceCacheLimit, set on a Namespace by an operator, caps the
	// cache bytes admitted to the namespace's CacheBindings (a quantity such as
	// 100Gi); a binding beyond it stays Pending with NamespaceCacheLimit. It counts
	// the caches' resolved sizes, not their metadata LVs and extent rounding: a
	// tenant's quota is on what it asks for, whatever the extent size of the nodes
	// its volumes land on, and the nodes' pools are kept from overcommit by admission.
	AnnotationNamespaceCacheLimit = "ssdcache.io/cache-bytes-limit"
	// AnnotationNamespaceBindingLimit, set on a Namespace by an operator, caps
	// how many of the namespace's CacheBindings may be admitted at once (a whole
	// number such as 50); a binding beyond it stays Pending with
	// NamespaceBindingLimit. Each admitted binding is a cache its node's agent
	// works on and watches; the number of CacheBinding objects a namespace may
	// create at all is capped by a ResourceQuota on count/cachebindings.ssdcache.io.
	AnnotationNamespaceBindingLimit = "ssdcache.io/cache-bindings-limit"

	// LabelNode, set by the controller on a CacheBinding once it knows the node
	// holding the binding's volume, and on a bound PersistentVolumeClaim of this
	// driver whose volume is pinned to one node, names that node. Each node agent
	// watches only the bindings and claims carrying its node's name, so that its
	// memory does not grow with the cluster's. It is a selector, not an
	// authority: the agent acts on status.nodeName (and a claim's PV) alone, and
	// the controller puts the label back when a user changes it.
	LabelNode = "ssdcache.io/node"

	// AgentLeasePrefix starts the name of the coordination.k8s.io Lease each node
	// agent renews in its namespace (see AgentLeaseName).
	AgentLeasePrefix = "ssdcache-node."

	// LabelManagedBy marks CacheBindings the controller created from a StorageClass.
	LabelManagedBy = "app.kubernetes.io/managed-by"
	// ManagedByController is the LabelManagedBy value of auto-created bindings.
	ManagedByController = "ssdcache-controller"
)

// StorageClass parameters (README, "StorageClass parameters"); ParseCacheParameters reads them.
const (
	// ParamCacheMode is `ReadCache` (every volume of the class gets a cache) or
	// `None`; the spellings of CacheBindingSpec.Mode and .Warmup.
	ParamCacheMode = "ssdcache.io/cache-mode"
	// ParamCacheSize is the cache size per volume: a quantity (`10Gi`) or a percentage
	// of the volume (`10%`), in the syntax of CacheBindingSpec.Size.
	ParamCacheSize = "ssdcache.io/cache-size"
	// ParamDeviceClass selects the device class (the NVMe volume group a node
	// calls by that name, its --device-class) that caches of the class are carved from.
	ParamDeviceClass = "ssdcache.io/device-class"
	// ParamWarmup is the warm-up policy of the class's bindings: `HotSet` or `None`.
	ParamWarmup = "ssdcache.io/warmup"
	// ParamFSType is the standard CSI filesystem-type parameter.
	ParamFSType = "csi.storage.k8s.io/fstype"

	// CacheModeReadCache is the ParamCacheMode value that asks for a cache,
	// spelled as ModeReadCache.
	CacheModeReadCache = string(ModeReadCache)
	// CacheModeNone is the ParamCacheMode value for classes without a cache,
	// spelled as WarmupNone.
	CacheModeNone = string(WarmupNone)
	// DefaultCacheSize is used when a caching StorageClass does not set ParamCacheSize.
	DefaultCacheSize = "10%"
)

// Condition types of CacheBindingStatus.Conditions.
const (
	// ConditionReady is True while the cache is attached and serving reads as the spec
	// asks (written by the node agent; the controller sets it False while a binding is
	// not admitted to a node, when no agent is responsible for it).
	ConditionReady = "Ready"
	// ConditionDegraded is True when the cache was dropped because its device failed;
	// the volume keeps working from the origin (written by the node agent).
	ConditionDegraded = "Degraded"
	// ConditionPending is True while the binding waits for admission to a node
	// (written by the controller); the reason says what it waits for.
	ConditionPending = "Pending"
	// ConditionWarmingUp is True while the node agent copies the volume's hot set
	// into a new cache; its message gives the bytes copied so far. It goes once the
	// cache is live (status.lastWarmup then records the fill).
	ConditionWarmingUp = "WarmingUp"
	// ConditionCacheRetried is True once the node agent spent the one automatic
	// retry a Degraded binding gets per generation of its spec (the condition's
	// observedGeneration): after the dropped cache's LVs were removed from the
	// node's cache pool (the failed device's PV taken out, or the pool's VG
	// made again on a new device), it attaches a new cache
	// without a spec change. Its reason says how the retry went
	// (ReasonRetryAttaching, ReasonRetryAttached, ReasonRetryAttachFailed).
	// While it is True for the current generation there is no other automatic
	// retry, whatever restarts of the agent come between, even when the new
	// cache is dropped too. A spec change attaches a new cache by itself (how an
	// operator asks for another try) and allows one more automatic retry: the
	// agent removes the condition of an older generation at its next status
	// write (written by the node agent).
	ConditionCacheRetried = "CacheRetried"
)

// Reasons of the Pending condition (written by the controller); while a binding
// is Pending, Ready=False carries the same reason.
const (
	ReasonPVCNotFound          = "PVCNotFound"
	ReasonPVCNotBound          = "PVCNotBound"
	ReasonVolumeNotCacheable   = "VolumeNotCacheable"
	ReasonNodeUnknown          = "NodeUnknown"
	ReasonCacheCapacityUnknown = "CacheCapacityUnknown"
	ReasonInsufficientCache    = "InsufficientCache"
	ReasonInvalidSize          = "InvalidSize"
	ReasonDuplicateBinding     = "DuplicateBinding"
	// ReasonNamespaceCacheLimit: the namespace's cache limit would be exceeded.
	ReasonNamespaceCacheLimit = "NamespaceCacheLimit"
	// ReasonNamespaceBindingLimit: the namespace's limit on admitted bindings would be exceeded.
	ReasonNamespaceBindingLimit = "NamespaceBindingLimit"
	// ReasonDeviceClassUnavailable: the volume's node has no cache pool of spec.deviceClass.
	ReasonDeviceClassUnavailable = "DeviceClassUnavailable"
	// ReasonAdmitted is the reason of Pending=False once a node was chosen.
	ReasonAdmitted = "Admitted"
)

// Reasons of the Ready and Degraded conditions (written by the node agent).
const (
	ReasonCopyingHotSet      = "CopyingHotSet"
	ReasonAttaching          = "Attaching"
	ReasonAttached           = "Attached"
	ReasonPaused             = "Paused"
	ReasonDetaching          = "Detaching"
	ReasonVolumeNotStaged    = "VolumeNotStaged"
	ReasonCacheDeviceFailed  = "CacheDeviceFailed"
	ReasonCacheDeviceHealthy = "CacheDeviceHealthy"
)

// Reasons of the CacheRetried condition (written by the node agent). The
// agent writes ReasonRetryAttaching before it attaches, so a Degraded binding
// left with it lost its retry's outcome (the agent restarted, or a status
// write failed, before it was written) and is not retried again in this
// generation.
const (
	// ReasonRetryAttaching: the new cache is being attached.
	ReasonRetryAttaching = "Attaching"
	// ReasonRetryAttached: the new cache was attached; the binding is no
	// longer Degraded.
	ReasonRetryAttached = "Attached"
	// ReasonRetryAttachFailed: attaching the new cache failed; the binding
	// stays Degraded, the condition's message says why.
	ReasonRetryAttachFailed = "AttachFailed"
)

// AgentLeaseName is the name of the Lease the node agent of nodeName renews. A
// node name is a DNS subdomain of at most 253 characters, like a Lease name, so
// one too long for the prefix is cut (node names that long do not occur in
// practice; two nodes sharing their first 239 characters would share a Lease).
func AgentLeaseName(nodeName string) string {
	name := AgentLeasePrefix + nodeName
	return strings.TrimRight(name[:min(253, len(name))], ".-")
}
