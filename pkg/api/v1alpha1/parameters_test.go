package v1alpha1

import (
	"strings"
	"testing"
)

// The CRD's spellings parse without a deprecation.
func TestParametersInTheCRDsSpellings(t *testing.T) {
	params := map[string]string{ParamCacheMode: "ReadCache", ParamWarmup: "HotSet", ParamDeviceClass: "nvme"}
	p, err := ParseCacheParameters(params)
	if err != nil || !p.Cached || p.Warmup != WarmupHotSet || p.DeviceClass != "nvme" {
		t.Fatalf("%v: %+v, %v", params, p, err)
	}
	if notes := DeprecatedSpellings(params); notes != nil {
		t.Errorf("%v: deprecations %q, want none", params, notes)
	}
	none := map[string]string{ParamCacheMode: "None"}
	if p, err := ParseCacheParameters(none); err != nil || p.Cached || DeprecatedSpellings(none) != nil {
		t.Errorf("%v: %+v, %v, %q", none, p, err, DeprecatedSpellings(none))
	}
}

// One case per old spelling: each is still accepted, means what the CRD's
// spelling means, and yields a deprecation naming the parameter, the value
// and the spelling to write.
func TestOldSpellingsAreAcceptedAndDeprecated(t *testing.T) {
	for _, c := range []struct {
		key, old, want string
	}{
		{ParamCacheMode, "readcache", "ReadCache"},
		{ParamCacheMode, "none", "None"},
		{ParamWarmup, "hotset", "HotSet"},
		{ParamWarmup, "none", "None"},
	} {
		params := map[string]string{ParamCacheMode: "ReadCache", c.key: c.old}
		canon := map[string]string{ParamCacheMode: "ReadCache", c.key: c.want}
		got, err := ParseCacheParameters(params)
		want, _ := ParseCacheParameters(canon)
		if err != nil || got != want {
			t.Errorf("%v parses to %+v, %v; want %+v as %v", params, got, err, want, canon)
		}
		notes := DeprecatedSpellings(params)
		wantNote := `parameter ` + c.key + `: "` + c.old + `" is deprecated, write "` + c.want + `"`
		if len(notes) != 1 || !strings.HasPrefix(notes[0], wantNote) {
			t.Errorf("%v: deprecations %q, want one starting %q", params, notes, wantNote)
		}
	}
}

// A value in no case of the allowed ones is refused, naming the parameter,
// the value and the CRD's spellings.
func TestBadModeValuesNameWhatIsAllowed(t *testing.T) {
	for params, want := range map[string]string{
		"writeback": `parameter ssdcache.io/cache-mode: "writeback" is not allowed; allowed values are ReadCache, None`,
		"Paused":    `parameter ssdcache.io/cache-mode: "Paused" is not allowed; allowed values are ReadCache, None`,
	} {
		if _, err := ParseCacheParameters(map[string]string{ParamCacheMode: params}); err == nil || err.Error() != want {
			t.Errorf("cache-mode %q: %v, want %q", params, err, want)
		}
	}
	_, err := ParseCacheParameters(map[string]string{ParamCacheMode: "ReadCache", ParamWarmup: "eager"})
	if want := `parameter ssdcache.io/warmup: "eager" is not allowed; allowed values are HotSet, None`; err == nil || err.Error() != want {
		t.Errorf("warmup eager: %v, want %q", err, want)
	}
}

// A PV's volume context keeps the lowercase cache mode that node plugins
// before 0.2 read, so that a rollback can still stage it.
func TestVolumeContextKeepsTheSpellingEveryReleaseReads(t *testing.T) {
	for mode, want := range map[string]string{"ReadCache": "readcache", "None": "none"} {
		p, err := ParseCacheParameters(map[string]string{ParamCacheMode: mode})
		if err != nil {
			t.Fatal(err)
		}
		ctx := p.VolumeContext()
		if ctx[ParamCacheMode] != want {
			t.Errorf("cache-mode %s: volume context %v, want %s=%s", mode, ctx, ParamCacheMode, want)
		}
		if again, err := ParseCacheParameters(ctx); err != nil || again != p {
			t.Errorf("volume context %v reparses to %+v, %v; want %+v", ctx, again, err, p)
		}
	}
}
