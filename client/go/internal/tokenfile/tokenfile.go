// Package tokenfile reads the load programs' workloads: a text file of whitespace-separated
// token ids, as bench/client_bench.py and bench/service_bench.py write them.
package tokenfile

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Read returns the token ids in path; a file with none is an error.
func Read(path string) ([]uint32, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var ids []uint32
	for _, field := range strings.Fields(string(data)) {
		id, err := strconv.ParseUint(field, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		ids = append(ids, uint32(id))
	}
	if len(ids) == 0 {
		return nil, fmt.Errorf("%s: no token ids", path)
	}
	return ids, nil
}
