package v1alpha1

import (
	"strings"
	"testing"
	"time"
)

// TestParseCacheSizeHugeExponentIsQuick: ParseQuantity builds the exact decimal of
// "1e2147483647" (minutes and gigabytes); a StorageClass parameter or a binding must
// not stall the controller that way. An overlong parameter is refused without being
// echoed whole.
func TestParseCacheSizeHugeExponentIsQuick(t *testing.T) {
	for _, in := range []string{"1e2147483647", "1e-2147483648", "1e10000000", "16e-10000000", strings.Repeat("9", 1<<20)} {
		done := make(chan error, 1)
		go func() {
			_, err := ParseCacheSize(in)
			done <- err
		}()
		select {
		case err := <-done:
			if err == nil {
				t.Errorf("ParseCacheSize(%.40q): no error", in)
			} else if len(err.Error()) > 200 {
				t.Errorf("ParseCacheSize(%.40q): error of %d characters", in, len(err.Error()))
			}
		case <-time.After(2 * time.Second):
			t.Fatalf("ParseCacheSize(%.40q) still running after 2s", in)
		}
	}
}
