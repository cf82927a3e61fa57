package assembly_test

import (
	"testing"

	"github.com/majorhq/major/internal/leakcheck"
)

func TestMain(m *testing.M) {
	leakcheck.Main(m)
}
