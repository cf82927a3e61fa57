package sandbox_test

import (
	"fmt"
	"os"
	"strconv"
	"testing"
)

func TestMain(m *testing.M) {
	if n, err := strconv.Atoi(os.Getenv(forkEnv)); err == nil {
		fmt.Println(forkMany(n))
		os.Exit(0)
	}
	os.Exit(m.Run())
}
