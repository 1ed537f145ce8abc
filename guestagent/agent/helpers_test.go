package agent

import (
	"os"
	"path/filepath"
)

func mkdirWrite(dir, name string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "name"), []byte(name), 0o644)
}
