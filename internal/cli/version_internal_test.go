package cli

import (
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
)

// sqlease version names the version, the commit and whether the tree had
// local changes, from the build information go build and go install stamp;
// without any it still says something useful, never a bare "(devel)".
func TestVersionOf(t *testing.T) {
	stamped := func(version string, settings ...string) *debug.BuildInfo {
		info := &debug.BuildInfo{GoVersion: "go1.99.1", Main: debug.Module{Path: "github.com/sqlease/sqlease", Version: version}}
		for i := 0; i+1 < len(settings); i += 2 {
			info.Settings = append(info.Settings, debug.BuildSetting{Key: settings[i], Value: settings[i+1]})
		}
		return info
	}
	platform := runtime.GOOS + "/" + runtime.GOARCH
	for _, tc := range []struct {
		name, ldflags string
		info          *debug.BuildInfo
		want          string
	}{
		{"go install @version", "", stamped("v1.4.0"), "v1.4.0 (go1.99.1 " + platform + ")"},
		{"go build in a checkout", "", stamped("v0.0.0-20261127004215-43f98f7abcde+dirty",
			"vcs", "git", "vcs.revision", "43f98f7abcde0123456789", "vcs.time", "2026-11-27T00:42:15Z", "vcs.modified", "true"),
			"v0.0.0-20261127004215-43f98f7abcde+dirty (commit 43f98f7abcde0123456789 of 2026-11-27T00:42:15Z, with local changes; go1.99.1 " + platform + ")"},
		{"clean checkout, older Go", "", stamped("(devel)", "vcs.revision", "abc", "vcs.modified", "false"),
			"devel (commit abc; go1.99.1 " + platform + ")"},
		{"ldflags", "v2.0.0", stamped("(devel)"), "v2.0.0 (go1.99.1 " + platform + ")"},
		{"nothing stamped", "", stamped("(devel)"), "devel (no version or commit stamped"},
		{"no build info", "", nil, "devel (no version or commit stamped"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := versionOf(tc.ldflags, tc.info)
			if !strings.HasPrefix(got, tc.want) || strings.Contains(got, "(devel)") {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}
