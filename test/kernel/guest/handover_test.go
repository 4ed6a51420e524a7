package guest

import (
	"fmt"
	"testing"
	"time"

	"github.com/ssdcache/ssdcache/pkg/agent"
	"github.com/ssdcache/ssdcache/pkg/cache"
	"github.com/ssdcache/ssdcache/pkg/dm"
)

// TestFilledCacheHandedOverToSmq: a cache that warms up starts on the
// cleaner policy, which promotes nothing by itself, so the promoter alone
// fills it; reads of more data than it holds fill it, and the promoter then
// hands it over to smq, which replaces blocks by use, keeping every mapping
// and every byte, on metadata whose clean-shutdown flag is clear.
func TestFilledCacheHandedOverToSmq(t *testing.T) {
	e := guestEnv(t)
	p := startPlugin(t, e)
	v := p.provision(t, "handover", 128<<20, cached("32Mi"), fsCapability("ext4"))
	p.stage(t, v)
	p.publish(t, v)
	if got := livePolicy(t, v.id); got != cache.PolicyFilling {
		t.Fatalf("a new cache that warms up runs %q, want %q", got, cache.PolicyFilling)
	}
	sums := dataset(t, v.target, 48)
	t.Logf("pass 1 over 48 MiB: %v", readPass(t, v.id, sums))
	err := poll("the full cache handed over to "+cache.PolicyReplacing, 200*time.Millisecond, func() (bool, string, error) {
		c, ok := table(t, v.id).Target.(dm.CacheTarget)
		if !ok {
			return false, "no cache table (a promotion swapped it out)", nil
		}
		st := cacheStatus(t, v.id)
		return c.Policy == cache.PolicyReplacing, fmt.Sprintf("policy %s, %d of %d blocks cached", c.Policy, st.CacheUsed, st.CacheTotal), nil
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, p.diagnose())
	}
	st := cacheStatus(t, v.id)
	if st.CacheUsed+agent.MinPromoteBlocks <= st.CacheTotal {
		t.Fatalf("handed over with %d of %d blocks cached, want room for fewer than %d (a batch)", st.CacheUsed, st.CacheTotal, agent.MinPromoteBlocks)
	}
	logPromotions(t, p)
	// Handed over on a second metadata LV (the engine knew the mappings), a
	// table that opened its metadata afresh: dm-cache cleared the
	// clean-shutdown flag, so a shutdown mark can still vouch for a clean
	// removal. A reload over the same metadata would have left it set.
	live := table(t, v.id).Target.(dm.CacheTarget)
	metaDev := fmt.Sprintf("/dev/block/%d:%d", live.Metadata.Major, live.Metadata.Minor)
	sb, err := dm.NewCacheTools(nil, "").Superblock(t.Context(), metaDev)
	if err != nil || sb.CleanShutdown {
		t.Fatalf("the handed-over cache's metadata %s: %+v (%v); want it readable with the clean-shutdown flag clear\n%s", metaDev, sb, err, p.log)
	}
	t.Logf("pass 2 after the hand-over: %v", readPass(t, v.id, sums))
	p.teardown(t, v)
}

// livePolicy is the policy of a volume's live cache table.
func livePolicy(t testing.TB, id string) string {
	t.Helper()
	c, ok := table(t, id).Target.(dm.CacheTarget)
	if !ok {
		t.Fatalf("volume %s: table %q, want a cache", id, table(t, id))
	}
	return c.Policy
}
