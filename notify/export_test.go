package notify

import "time"

// Flush waits until every notification decided so far has been sent to
// every device (or failed): a test that expects none can then say so.
func (s *Service) Flush() { s.queued.Wait() }

// QuietUntil is q.until, for the test of quiet hours' spans.
func QuietUntil(q *QuietHours, now time.Time) (time.Time, bool) { return q.until(now) }
