package csi

import (
	"strings"
	"testing"

	"github.com/ssdcache/ssdcache/pkg/api/v1alpha1"
)

func TestParseParamsRoundTripsThroughVolumeContext(t *testing.T) {
	p, err := parseParams(map[string]string{
		v1alpha1.ParamCacheMode: "ReadCache", v1alpha1.ParamCacheSize: "10%", v1alpha1.ParamDeviceClass: "nvme",
		v1alpha1.ParamWarmup: "None", "csi.storage.k8s.io/pvc/name": "data",
	}, false)
	if err != nil {
		t.Fatal(err)
	}
	again, err := parseParams(p.VolumeContext(), true)
	if err != nil || again != p {
		t.Fatalf("volume context %v parses to %+v (%v), want %+v", p.VolumeContext(), again, err, p)
	}
	spec, err := again.cacheSpec(10 << 30)
	if err != nil || spec.SizeBytes != 1<<30 || spec.Class != "nvme" || spec.Warm {
		t.Fatalf("spec %+v, %v", spec, err)
	}
}

func TestUncachedByDefault(t *testing.T) {
	p, err := parseParams(nil, false)
	if err != nil || p.Cached {
		t.Fatalf("%+v %v", p, err)
	}
	if spec, err := p.cacheSpec(1 << 30); spec != nil || err != nil {
		t.Fatalf("uncached volume got spec %+v %v", spec, err)
	}
}

func FuzzParseParams(f *testing.F) {
	f.Add("ssdcache.io/cache-mode", "ReadCache", "ssdcache.io/cache-size", "10%")
	f.Add("ssdcache.io/device", "/dev/disk/by-id/x", "ssdcache.io/cache-size", "1Gi")
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2 string) {
		p, err := parseParams(map[string]string{k1: v1, k2: v2}, true)
		if err != nil {
			if !strings.Contains(err.Error(), "parameter") && !strings.Contains(err.Error(), "volume attribute") {
				t.Fatalf("error does not name the parameter: %v", err)
			}
			return
		}
		// Whatever is accepted must survive the trip through the PV.
		if again, err := parseParams(p.VolumeContext(), true); err != nil || again.Cached != p.Cached || again.Size != p.Size {
			t.Fatalf("%v: volume context %v reparses to %+v, %v", p, p.VolumeContext(), again, err)
		}
	})
}

// A StorageClass's fixed cache size larger than the volume is capped at the
// volume's size, as the controller caps a binding's: never a cache (and a
// charge) bigger than what it fronts.
func TestCacheSizeCappedAtVolumeSize(t *testing.T) {
	p, err := parseParams(map[string]string{"ssdcache.io/cache-mode": "ReadCache", "ssdcache.io/cache-size": "9223372036854775k"}, false)
	if err != nil {
		t.Fatal(err)
	}
	spec, err := p.cacheSpec(10 << 30)
	if err != nil {
		t.Fatal(err)
	}
	if spec.SizeBytes != 10<<30 {
		t.Fatalf("9223372036854775k on a 10Gi volume resolved to %d bytes, want 10Gi", spec.SizeBytes)
	}
}

// A StorageClass's old spelling is logged once, however often it is parsed;
// a volume context's, which PVs keep on purpose, never.
func TestOldSpellingsAreLoggedOnce(t *testing.T) {
	var logged []string
	saved := spellingWarnings
	spellingWarnings = &onceLog{log: func(msg string) { logged = append(logged, msg) }}
	t.Cleanup(func() { spellingWarnings = saved })
	old := map[string]string{v1alpha1.ParamCacheMode: "readcache", v1alpha1.ParamWarmup: "hotset"}
	for range 3 {
		p, err := parseParams(old, false)
		if err != nil || !p.Cached || p.Warmup != v1alpha1.WarmupHotSet {
			t.Fatalf("%v: %+v, %v", old, p, err)
		}
	}
	if _, err := parseParams(map[string]string{v1alpha1.ParamCacheMode: "none"}, true); err != nil {
		t.Fatal(err)
	}
	if len(logged) != 2 || !strings.Contains(logged[0], `"readcache" is deprecated`) || !strings.Contains(logged[1], `"hotset" is deprecated`) {
		t.Errorf("logged %q, want the two old spellings once each", logged)
	}
}
