package e2e

import (
	"fmt"
	"strings"
)

// The workloads are bash in the project image (Debian, coreutils): a data
// set of files with their SHA-256 sums, written once, then read back with
// O_DIRECT (so every read reaches the dm device, not the page cache) and
// checked, pass after pass. Any mismatch or I/O error ends the pod (Failed).
const (
	dataFiles  = 3
	dataFileMB = 4
	// readinessFile marks a written data set; the pods' startup probe waits for it.
	readinessFile = "/data/.written"
)

// writeDataSet writes the data set unless it is already there.
var writeDataSet = fmt.Sprintf(`set -eu
cd /data
if [ ! -e %[3]s ]; then
  for i in $(seq %[1]d); do head -c %[2]dM /dev/urandom > f$i; done
  written=$SECONDS
  sha256sum f* > SUMS && sync && touch %[3]s
  echo "wrote %[1]d x %[2]d MiB in ${written}s, summed and synced in $((SECONDS-written))s"
fi
`, dataFiles, dataFileMB, readinessFile)

// verifyLoop reads every file with O_DIRECT and compares it with SUMS,
// forever, printing "pass N ok" after each pass.
const verifyLoop = `n=0
while :; do
  n=$((n+1))
  while read -r sum f; do
    got=$(dd if=/data/$f bs=1M iflag=direct status=none | sha256sum | cut -d' ' -f1) || { echo "FAIL pass $n: read error on $f"; exit 1; }
    [ "$got" = "$sum" ] || { echo "FAIL pass $n: $f has $got, want $sum"; exit 1; }
  done < /data/SUMS
  echo "pass $n ok"
  sleep 0.5
done
`

// storageClassUncached makes plain HDD volumes that a CacheBinding caches later.
const storageClassUncached = `apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: e2e-uncached}
provisioner: ssdcache.io
volumeBindingMode: WaitForFirstConsumer
reclaimPolicy: Delete
parameters:
  ssdcache.io/cache-mode: none
  csi.storage.k8s.io/fstype: ext4
`

// pvcAndPod is a PVC of class sc and a pod running script on it.
func pvcAndPod(name, sc, size, image, script string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: %[1]s, namespace: default}
spec:
  storageClassName: %[2]s
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: %[3]s}}
---
apiVersion: v1
kind: Pod
metadata: {name: %[1]s, namespace: default}
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 1
  securityContext: {runAsUser: 65532, runAsGroup: 65532, fsGroup: 65532}
  containers:
  - name: main
    image: %[4]s
    imagePullPolicy: Never
    command: [bash, -c, %[5]q]
    # A startup probe, not a readiness probe: it stops once the data set is
    # written, and the pod stays Ready. Every exec probe is a runc exec, which
    # costs the emulated node a large share of its CPU when repeated forever.
    startupProbe:
      exec: {command: [test, -e, %[6]s]}
      periodSeconds: 2
      failureThreshold: 1800
    volumeMounts: [{name: data, mountPath: /data}]
  volumes:
  - name: data
    persistentVolumeClaim: {claimName: %[1]s}
`, name, sc, size, image, script, readinessFile)
}

// cacheBinding asks for a cache in front of PVC pvc, online.
func cacheBinding(pvc, size string, preloadPaths ...string) string {
	manifest := fmt.Sprintf(`apiVersion: ssdcache.io/v1alpha1
kind: CacheBinding
metadata: {name: %[1]s, namespace: default}
spec:
  pvcName: %[1]s
  size: %[2]s
  mode: ReadCache
`, pvc, size)
	if len(preloadPaths) > 0 {
		manifest += fmt.Sprintf("  preloadPaths: [%s]\n", strings.Join(preloadPaths, ", "))
	}
	return manifest
}
