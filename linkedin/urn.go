package linkedin

import (
	"fmt"
	"regexp"
)

// The URN shapes the tools accept. LinkedIn ids are decimal numbers; a
// comment URN is composite: the activity (or share/ugcPost) it belongs to and
// the comment's own id, e.g. urn:li:comment:(urn:li:activity:123,456).
var (
	postURN    = regexp.MustCompile(`^urn:li:(share|ugcPost|activity):[0-9]+$`)
	commentURN = regexp.MustCompile(`^urn:li:comment:\(urn:li:(share|ugcPost|activity):[0-9]+,[0-9]+\)$`)
)

// ValidatePostURN checks that urn names a post: urn:li:share:…,
// urn:li:ugcPost:… or urn:li:activity:… with a numeric id.
func ValidatePostURN(urn string) error {
	if !postURN.MatchString(urn) {
		return fmt.Errorf("%q is not a LinkedIn post URN (expected urn:li:share:<id>, urn:li:ugcPost:<id> or urn:li:activity:<id>)", urn)
	}
	return nil
}

// ValidateCommentURN checks that urn names a comment, such as
// urn:li:comment:(urn:li:activity:123,456).
func ValidateCommentURN(urn string) error {
	if !commentURN.MatchString(urn) {
		return fmt.Errorf("%q is not a LinkedIn comment URN (expected urn:li:comment:(urn:li:activity:<id>,<comment id>))", urn)
	}
	return nil
}

// ValidateThreadURN accepts what comments can be read from: a post, or a
// comment (whose replies are then listed).
func ValidateThreadURN(urn string) error {
	if postURN.MatchString(urn) || commentURN.MatchString(urn) {
		return nil
	}
	return fmt.Errorf("%q is not a LinkedIn post or comment URN (expected urn:li:share:<id>, urn:li:ugcPost:<id>, urn:li:activity:<id> or urn:li:comment:(urn:li:activity:<id>,<comment id>))", urn)
}
