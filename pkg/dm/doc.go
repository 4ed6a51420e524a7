// Package dm is ssdcache's device-mapper layer: it builds and parses the two
// tables a staged volume can have (linear, and dm-cache in writethrough
// mode, or passthrough as older versions paused), parses dm-cache's status line, sizes cache blocks and
// metadata, and drives dmsetup behind the Interface that the cache engine uses.
//
// Reference: Documentation/admin-guide/device-mapper/cache.rst in the kernel.
package dm
