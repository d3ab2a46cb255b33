package kubeletrig

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// The images the rig imports: no registry is reachable, so each is one
// static binary of ./images packed as a one-layer OCI archive.
const (
	PauseImage   = "localhost/pause:local"   // the pod sandbox (containerd's sandbox_image)
	EnvdumpImage = "localhost/envdump:local" // prints its environment, then waits
)

// envdumpDone is the line envdump prints after the environment
// (images/envdump.Done).
const envdumpDone = "envdump: done"

// buildImages compiles images/pause and images/envdump (static, no cgo)
// and packs each into an OCI archive in dir; it returns the archives.
func buildImages(moduleRoot, dir string) ([]string, error) {
	var archives []string
	for name, ref := range map[string]string{"pause": PauseImage, "envdump": EnvdumpImage} {
		bin := filepath.Join(dir, name)
		cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", bin, "./kubeletrig/images/"+name)
		cmd.Dir = moduleRoot
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("kubeletrig: build image binary %s: %w\n%s", name, err, out)
		}
		archive := filepath.Join(dir, name+".tar")
		if err := ociArchive(ref, bin, archive); err != nil {
			return nil, err
		}
		archives = append(archives, archive)
	}
	return archives, nil
}

type descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int               `json:"size"`
	Platform    map[string]string `json:"platform,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// ociArchive writes to out an OCI image layout, as a tar, holding one
// image named ref: a layer with bin at /<base name>, its entrypoint. The
// index's io.containerd.image.name annotation is the name ctr import
// tags it with.
func ociArchive(ref, bin, out string) error {
	name := filepath.Base(bin)
	content, err := os.ReadFile(bin)
	if err != nil {
		return fmt.Errorf("kubeletrig: read %s: %w", bin, err)
	}
	var layer bytes.Buffer
	tw := tar.NewWriter(&layer)
	if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o755, Size: int64(len(content)), Typeflag: tar.TypeReg}); err != nil {
		return fmt.Errorf("kubeletrig: pack %s: %w", bin, err)
	}
	if _, err := tw.Write(content); err != nil {
		return fmt.Errorf("kubeletrig: pack %s: %w", bin, err)
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("kubeletrig: pack %s: %w", bin, err)
	}

	blobs := map[string][]byte{}
	put := func(b []byte) (string, int) {
		d := sha256.Sum256(b)
		h := hex.EncodeToString(d[:])
		blobs[h] = b
		return "sha256:" + h, len(b)
	}
	layerDigest, layerSize := put(layer.Bytes())
	config, err := json.Marshal(map[string]any{
		"architecture": "amd64", "os": "linux",
		"config": map[string]any{"Entrypoint": []string{"/" + name}},
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{layerDigest}},
	})
	if err != nil {
		return err
	}
	configDigest, configSize := put(config)
	manifest, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.manifest.v1+json",
		"config":        descriptor{MediaType: "application/vnd.oci.image.config.v1+json", Digest: configDigest, Size: configSize},
		"layers":        []descriptor{{MediaType: "application/vnd.oci.image.layer.v1.tar", Digest: layerDigest, Size: layerSize}},
	})
	if err != nil {
		return err
	}
	manifestDigest, manifestSize := put(manifest)
	_, tag, _ := strings.Cut(ref[strings.LastIndex(ref, "/")+1:], ":")
	index, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"manifests": []descriptor{{MediaType: "application/vnd.oci.image.manifest.v1+json", Digest: manifestDigest, Size: manifestSize,
			Platform:    map[string]string{"architecture": "amd64", "os": "linux"},
			Annotations: map[string]string{"io.containerd.image.name": ref, "org.opencontainers.image.ref.name": tag}}},
	})
	if err != nil {
		return err
	}

	var arch bytes.Buffer
	aw := tar.NewWriter(&arch)
	add := func(path string, b []byte) error {
		if err := aw.WriteHeader(&tar.Header{Name: path, Mode: 0o644, Size: int64(len(b)), Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		_, err := aw.Write(b)
		return err
	}
	if err := add("oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)); err != nil {
		return fmt.Errorf("kubeletrig: write %s: %w", out, err)
	}
	if err := add("index.json", index); err != nil {
		return fmt.Errorf("kubeletrig: write %s: %w", out, err)
	}
	for h, b := range blobs {
		if err := add("blobs/sha256/"+h, b); err != nil {
			return fmt.Errorf("kubeletrig: write %s: %w", out, err)
		}
	}
	if err := aw.Close(); err != nil {
		return fmt.Errorf("kubeletrig: write %s: %w", out, err)
	}
	if err := os.WriteFile(out, arch.Bytes(), 0o644); err != nil {
		return fmt.Errorf("kubeletrig: write %s: %w", out, err)
	}
	return nil
}
