package cli

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/spf13/pflag"
)

// FuzzConfigFile: any config file and environment value is either loaded
// and valid, or refused with a configuration error (exit status 2) —
// never a panic, never another kind of error. Seeds below and in
// testdata/fuzz/FuzzConfigFile; run longer with
// go test -run '^$' -fuzz FuzzConfigFile -fuzztime 5m ./internal/cli
func FuzzConfigFile(f *testing.F) {
	f.Add([]byte("lease_duration: 6s\nrenew_interval: 2s\n"), "1s")
	f.Add([]byte("http: 127.0.0.1:0\nmax_concurrent: 10\napi_token: 0123456789abcdef0123\n"), "500ms")
	f.Add([]byte("lease_duration: 0s\n"), "-1s")
	f.Add([]byte("max_concurrent: 1000000000\n"), "25h")
	f.Add([]byte("[a, b]\n"), "x")
	f.Add([]byte("allow_exec: maybe\nallowed_hosts: a,b\n"), "")
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, file []byte, env string) {
		path := filepath.Join(dir, "c.yaml")
		if err := os.WriteFile(path, file, 0o600); err != nil {
			t.Fatal(err)
		}
		fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
		addFlags(fs, true)
		getenv := func(k string) string {
			switch k {
			case "SQLEASE_CONFIG":
				return path
			case "SQLEASE_ACQUIRE_INTERVAL":
				return env
			}
			return ""
		}
		c, err := load(fs, getenv, true)
		if err == nil {
			err = c.validate()
		}
		if err == nil {
			_, err = c.resolveToken()
		}
		var ue usageError
		if err != nil && !errors.As(err, &ue) {
			t.Fatalf("refused without a configuration error: %T %v", err, err)
		}
	})
}

// A token file that is a device must be refused, not read forever (the
// fuzzer found /dev/zero).
func TestTokenFileMustBeRegular(t *testing.T) {
	for _, path := range []string{"/dev/zero", "/dev/null", t.TempDir()} {
		c := Config{APITokenFile: path}
		var ue usageError
		if _, err := c.resolveToken(); !errors.As(err, &ue) {
			t.Errorf("token file %s: %v, want a configuration error", path, err)
		}
	}
}
