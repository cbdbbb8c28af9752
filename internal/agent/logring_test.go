package agent

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"testing"
)

func TestLogRing(t *testing.T) {
	t.Parallel()
	r := NewLogRing()
	var out bytes.Buffer
	base := slog.New(r.Handler(slog.NewTextHandler(&out, nil), slog.LevelInfo))
	a, b := base.With("node", "a"), base.With("node", "b")
	base.Info("process line")
	for i := range logRingSize + 10 {
		a.Info(fmt.Sprintf("a%d", i))
	}
	b.Info("b0")
	a.Debug("not kept")

	got := r.tail("a", 3)
	if len(got) != 3 || !strings.Contains(got[0], fmt.Sprintf("msg=a%d", logRingSize+7)) || !strings.Contains(got[2], fmt.Sprintf("msg=a%d", logRingSize+9)) {
		t.Errorf("tail(a, 3) = %q", got)
	}
	if !strings.Contains(got[2], "node=a") {
		t.Errorf("line lacks its attributes: %q", got[2])
	}
	if got := r.tail("b", 5); len(got) != 1 || !strings.Contains(got[0], "msg=b0") {
		t.Errorf("tail(b) = %q (the process line was overwritten)", got)
	}
	if n := len(r.tail("a", 5000)); n != logRingSize-1 {
		t.Errorf("ring holds %d lines of a, want %d", n, logRingSize-1)
	}
	if !strings.Contains(out.String(), "msg=b0") {
		t.Error("lines were not passed on")
	}
	g := a.WithGroup("g").With("node", "x")
	g.Info("grouped")
	if got := r.tail("a", 1); !strings.Contains(got[0], "g.node=x") {
		t.Errorf("grouped line = %q", got)
	}
}
