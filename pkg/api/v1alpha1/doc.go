// Package v1alpha1 holds the ssdcache.io/v1alpha1 API: the CacheBinding type and
// the names (finalizer, annotations, condition types, StorageClass parameters) that
// the controller, the node agent and the CSI driver share.
//
// +kubebuilder:object:generate=true
// +groupName=ssdcache.io
package v1alpha1
