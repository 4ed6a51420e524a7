package cluster

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestListenServesInsideTheNamespaceOnly: a server on Listen's socket
// answers a command run in the namespace, at the address the listener
// reports, and the host's loopback does not lead to it.
func TestListenServesInsideTheNamespaceOnly(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("creates a network namespace: needs root")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n := &Netns{Name: "ssdcache-listen-test-" + strconv.Itoa(os.Getpid())}
	for _, args := range [][]string{{"netns", "add", n.Name}, {"-n", n.Name, "link", "set", "lo", "up"}} {
		if out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
		if args[0] == "netns" {
			t.Cleanup(func() { n.Delete() })
		}
	}

	l, err := n.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	const body = "served in the namespace"
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, body) })}
	go srv.Serve(l)
	defer srv.Close()
	port := l.Addr().(*net.TCPAddr).Port

	get := fmt.Sprintf("exec 3<>/dev/tcp/127.0.0.1/%d; printf 'GET / HTTP/1.0\\r\\n\\r\\n' >&3; cat <&3", port)
	out, err := n.Command(ctx, "bash", "-c", get).CombinedOutput()
	if err != nil || !strings.Contains(string(out), body) {
		t.Errorf("GET %s in the namespace: %v: %q, want %q", l.Addr(), err, out, body)
	}
	client := &http.Client{Timeout: 5 * time.Second}
	if resp, err := client.Get("http://" + l.Addr().String()); err == nil {
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(got) == body {
			t.Errorf("GET %s on the host reached the namespace's server", l.Addr())
		}
	}
}
