// Package dm is ssdcache's device-mapper layer: it builds and parses the two
// tables a staged volume can have (linear, and dm-cache in writethrough
// mode, or passthrough as older versions paused), parses dm-cache's status
// line, and drives dmsetup behind the Interface that the cache engine uses.
// Cache block and metadata sizes are package cachesize's, which the cluster
// controller shares.
//
// Reference: Documentation/admin-guide/device-mapper/cache.rst in the kernel.
package dm
