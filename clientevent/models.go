package clientevent

import (
	"regexp"
	"strings"
)

// modelID is a Claude model id: claude-<family>-<major>[-<minor>][-<date>]
// (or the older claude-<major>[-<minor>]-<family>[-<date>]), with a
// context suffix such as [1m].
var (
	modelID    = regexp.MustCompile(`^claude-(opus|sonnet|haiku)-(\d+)(?:-(\d{1,2}))?(?:-\d{8})?(\[1m\])?$`)
	oldModelID = regexp.MustCompile(`^claude-(\d+)(?:-(\d{1,2}))?-(opus|sonnet|haiku)(?:-\d{8}|-latest)?(\[1m\])?$`)
)

// ModelName is the name a person reads for a model alias or id:
// "Sonnet 4.5" for claude-sonnet-4-5-20250929, "Opus" for opus; an id it
// does not know is shown as it is, "" stays "".
func ModelName(model string) string {
	lower := strings.ToLower(strings.TrimSpace(model))
	title := func(s string) string { return strings.ToUpper(s[:1]) + s[1:] }
	version := func(major, minor string) string {
		if minor == "" {
			return major
		}
		return major + "." + minor
	}
	suffix := func(s string) string {
		if s != "" {
			return " (1M context)"
		}
		return ""
	}
	if m := modelID.FindStringSubmatch(lower); m != nil {
		return title(m[1]) + " " + version(m[2], m[3]) + suffix(m[4])
	}
	if m := oldModelID.FindStringSubmatch(lower); m != nil {
		return title(m[3]) + " " + version(m[1], m[2]) + suffix(m[4])
	}
	base, ctx, _ := strings.Cut(lower, "[")
	switch base {
	case "opus", "sonnet", "haiku":
		if ctx != "" {
			return title(base) + " (1M context)"
		}
		return title(base)
	case "opusplan":
		return "Opus (plans), Sonnet (the rest)"
	case "default":
		return "Default model"
	}
	return model
}
