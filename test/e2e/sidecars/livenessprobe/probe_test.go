package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ssdcache/ssdcache/test/e2e/sidecars/internal/fakecsi"
)

// clientTimeout is a generous bound on each request, never a pass/fail timing.
const clientTimeout = 30 * time.Second

// startProbe runs the livenessprobe against fake and returns its /healthz URL.
func startProbe(t *testing.T, fake *fakecsi.Identity, probeTimeout time.Duration) string {
	t.Helper()
	httpLis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen for /healthz: %v", err)
	}
	cfg := config{csiAddress: fake.Endpoint, httpEndpoint: httpLis.Addr().String(), probeTimeout: probeTimeout}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx, cfg, httpLis) }()
	stop := sync.OnceValue(func() error { cancel(); return <-done })
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("run returned %v after stop, want nil", err)
		}
	})
	return "http://" + httpLis.Addr().String() + "/healthz"
}

func getHealthz(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := (&http.Client{Timeout: clientTimeout}).Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read /healthz body: %v", err)
	}
	return resp.StatusCode, string(body)
}

func boolPtr(b bool) *bool { return &b }

func TestHealthzFollowsTheDriversProbe(t *testing.T) {
	fake := fakecsi.Start(t, "ssdcache.io")
	url := startProbe(t, fake, 5*time.Second)

	for _, tc := range []struct {
		name     string
		ready    *bool
		probeErr error
		wantCode int
		wantBody string
	}{
		{"ready field absent", nil, nil, http.StatusOK, "ok"},
		{"ready true", boolPtr(true), nil, http.StatusOK, "ok"},
		{"ready false", boolPtr(false), nil, http.StatusInternalServerError, "driver responded but is not ready"},
		{"probe error", nil, fakecsi.Unavailable("cache device gone"), http.StatusInternalServerError, "cache device gone"},
		{"recovered", boolPtr(true), nil, http.StatusOK, "ok"},
	} {
		fake.SetProbe(tc.ready, tc.probeErr)
		code, body := getHealthz(t, url)
		if code != tc.wantCode || !strings.Contains(body, tc.wantBody) {
			t.Errorf("%s: /healthz = %d %q, want %d containing %q", tc.name, code, body, tc.wantCode, tc.wantBody)
		}
	}
}

func TestHealthzFailsWhenTheDriverIsGone(t *testing.T) {
	fake := fakecsi.Start(t, "ssdcache.io")
	url := startProbe(t, fake, 200*time.Millisecond)
	if code, _ := getHealthz(t, url); code != http.StatusOK {
		t.Fatalf("/healthz with a live driver = %d, want 200", code)
	}

	fake.Stop()
	code, body := getHealthz(t, url)
	if code != http.StatusInternalServerError || !strings.Contains(body, fake.Endpoint) {
		t.Errorf("/healthz with the driver gone = %d %q, want 500 naming %s", code, body, fake.Endpoint)
	}
}

func TestRunReturnsWhenStoppedBeforeDriverAnswers(t *testing.T) {
	httpLis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = httpLis.Close() }()
	cfg := config{csiAddress: filepath.Join(t.TempDir(), "never.sock"), httpEndpoint: httpLis.Addr().String(), probeTimeout: time.Second}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := run(ctx, cfg, httpLis); err != nil {
		t.Errorf("run stopped while waiting for the driver = %v, want nil", err)
	}
}
