package supervisor

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"time"
)

// benchInput is 2000 small lines from the recorded transcript and one line
// of 5 MB, the shape of the CLI's output with one big tool result.
func benchInput(tb testing.TB) []byte {
	tb.Helper()
	var small [][]byte
	for _, l := range readTranscript(tb) {
		if len(l.Msg) < 4096 {
			small = append(small, l.Msg)
		}
	}
	var buf bytes.Buffer
	for i := range 2000 {
		buf.Write(small[i%len(small)])
		buf.WriteByte('\n')
		if i == 1000 {
			buf.WriteString(`{"type":"user","text":"` + strings.Repeat("x", 5<<20) + "\"}\n")
		}
	}
	return buf.Bytes()
}

// BenchmarkFramer times the Framer against bufio.Scanner with a buffer big
// enough for the 5 MB line, on the same input in the same loop; each line
// is copied in the baseline too, as the Framer's lines are the caller's to
// keep. The x-baseline metric is Framer time over Scanner time.
func BenchmarkFramer(b *testing.B) {
	input := benchInput(b)
	b.SetBytes(int64(len(input)))
	var framer, baseline time.Duration
	for b.Loop() {
		t0 := time.Now()
		f := NewFramer(bytes.NewReader(input), 0)
		n := 0
		for {
			line, err := f.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				b.Fatal(err)
			}
			n += len(line)
		}
		t1 := time.Now()
		sc := bufio.NewScanner(bytes.NewReader(input))
		sc.Buffer(make([]byte, 64<<10), 16<<20)
		m := 0
		for sc.Scan() {
			m += len(append([]byte(nil), sc.Bytes()...))
		}
		if sc.Err() != nil || m != n {
			b.Fatalf("scanner read %d bytes (%v), framer %d", m, sc.Err(), n)
		}
		framer += t1.Sub(t0)
		baseline += time.Since(t1)
	}
	b.ReportMetric(float64(framer)/float64(baseline), "x-baseline")
}

// BenchmarkDecodeMessage times DecodeMessage on the transcript's lines
// against a plain json.Unmarshal into a map, in the same loop.
func BenchmarkDecodeMessage(b *testing.B) {
	var lines [][]byte
	for _, l := range readTranscript(b) {
		lines = append(lines, l.Msg)
	}
	var dec, baseline time.Duration
	for b.Loop() {
		t0 := time.Now()
		for _, l := range lines {
			if _, err := DecodeMessage(l); err != nil {
				b.Fatal(err)
			}
		}
		t1 := time.Now()
		for _, l := range lines {
			var m map[string]any
			if err := json.Unmarshal(l, &m); err != nil {
				b.Fatal(err)
			}
		}
		dec += t1.Sub(t0)
		baseline += time.Since(t1)
	}
	b.ReportMetric(float64(dec)/float64(baseline), "x-baseline")
}
