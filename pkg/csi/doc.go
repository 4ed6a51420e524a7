// Package csi implements ssdcache's CSI Identity, Controller and Node
// services. The controller service runs on every node beside
// external-provisioner --node-deployment (distributed provisioning), so
// CreateVolume carves an origin LV out of this node's HDD pool.
//
// Handlers follow one shape: validate the request (pure, InvalidArgument
// naming the field), plan from what the node has, apply through the cache
// engine and the injected OS layers. Backend errors are sentinels, turned
// into gRPC codes only in errors.go.
package csi
