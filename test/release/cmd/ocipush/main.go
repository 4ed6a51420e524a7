// Command ocipush pushes the image of an OCI image-layout archive (the
// release's ssdcache-image-<version>.oci.tar) to a registry, for
// hack/release.sh when OCI_REGISTRY is given; no container engine needed.
// An image index (the release's linux/amd64 and linux/arm64 images) is
// pushed with every manifest it lists, and the tag names the index.
// Credentials come from $OCI_USERNAME and $OCI_PASSWORD (anonymous without).
//
//	go run ./test/release/cmd/ocipush -archive ssdcache-image-0.2.0.oci.tar \
//	    -ref ghcr.io/me/ssdcache:0.2.0
package main

import (
	"archive/tar"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

func main() {
	archive := flag.String("archive", "", "OCI image-layout tar holding one image or image index (required)")
	ref := flag.String("ref", "", "where to push it, registry/repository:tag (required)")
	plainHTTP := flag.Bool("plain-http", false, "talk to the registry over HTTP, without TLS (a local test registry)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	digest, err := push(ctx, *archive, *ref, *plainHTTP)
	if err != nil {
		fmt.Fprintln(os.Stderr, "ocipush:", err)
		os.Exit(1)
	}
	fmt.Printf("%s@%s\n", *ref, digest)
}

// push writes the archive's one image or image index to ref and returns its
// digest.
func push(ctx context.Context, archive, ref string, plainHTTP bool) (string, error) {
	if archive == "" || ref == "" {
		return "", errors.New("-archive and -ref are required")
	}
	var opts []name.Option
	if plainHTTP {
		opts = append(opts, name.Insecure)
	}
	tag, err := name.NewTag(ref, opts...)
	if err != nil {
		return "", fmt.Errorf("-ref %q: %w", ref, err)
	}
	dir, err := os.MkdirTemp("", "ocipush-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)
	if err := untar(archive, dir); err != nil {
		return "", err
	}
	index, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return "", fmt.Errorf("%s is no OCI image layout: %w", archive, err)
	}
	manifest, err := index.IndexManifest()
	if err != nil {
		return "", err
	}
	if len(manifest.Manifests) != 1 {
		return "", fmt.Errorf("%s holds %d images, want 1", archive, len(manifest.Manifests))
	}
	auth := authn.Anonymous
	if user := os.Getenv("OCI_USERNAME"); user != "" {
		auth = authn.FromConfig(authn.AuthConfig{Username: user, Password: os.Getenv("OCI_PASSWORD")})
	}
	pushOpts := []remote.Option{remote.WithContext(ctx), remote.WithAuth(auth)}
	desc := manifest.Manifests[0]
	if desc.MediaType.IsIndex() {
		idx, err := index.ImageIndex(desc.Digest)
		if err != nil {
			return "", err
		}
		if err := remote.WriteIndex(tag, idx, pushOpts...); err != nil {
			return "", fmt.Errorf("pushing the image index to %s: %w", tag, err)
		}
		return desc.Digest.String(), nil
	}
	img, err := index.Image(desc.Digest)
	if err != nil {
		return "", err
	}
	if err := remote.Write(tag, img, pushOpts...); err != nil {
		return "", fmt.Errorf("pushing to %s: %w", tag, err)
	}
	d, err := img.Digest()
	return d.String(), err
}

// untar unpacks the archive's regular files under dir; names that would
// leave dir are refused.
func untar(archive, dir string) error {
	f, err := os.Open(archive)
	if err != nil {
		return err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s: %w", archive, err)
		}
		path := filepath.Join(dir, h.Name)
		if !strings.HasPrefix(path, dir+string(filepath.Separator)) {
			return fmt.Errorf("%s: entry %q leaves the archive", archive, h.Name)
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		out, err := os.Create(path)
		if err != nil {
			return err
		}
		_, err = io.Copy(out, tr)
		if cerr := out.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	}
}
