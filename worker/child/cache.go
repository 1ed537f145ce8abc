package child

import (
	"io/fs"
	"os"
	"path/filepath"
	"sort"
)

// builtOne is called when a build ends; the last of concurrent builds
// trims the domain's compiler cache to its cap.
func (s *server) builtOne() {
	s.mu.Lock()
	s.building--
	idle := s.building == 0
	var capBytes int64
	if s.hello != nil {
		capBytes = s.hello.CacheBytes
	}
	s.mu.Unlock()
	if idle && s.opts.CacheDir != "" && capBytes > 0 {
		if removed, err := trimCache(s.opts.CacheDir, capBytes); err != nil {
			s.log.Warn("trim compiler cache", "err", err)
		} else if removed > 0 {
			s.log.Debug("compiler cache trimmed", "files", removed)
		}
	}
}

// trimCache removes the oldest files under dir until the files there take
// at most three quarters of capBytes, if they take more than capBytes. It
// returns how many files it removed.
func trimCache(dir string, capBytes int64) (int, error) {
	type file struct {
		path string
		size int64
		mod  int64
	}
	var files []file
	var total int64
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return nil // removed meanwhile
		}
		files = append(files, file{path, info.Size(), info.ModTime().UnixNano()})
		total += info.Size()
		return nil
	})
	if err != nil || total <= capBytes {
		return 0, err
	}
	sort.Slice(files, func(i, j int) bool { return files[i].mod < files[j].mod })
	removed := 0
	for _, f := range files {
		if total <= capBytes*3/4 {
			break
		}
		if err := os.Remove(f.path); err == nil {
			total -= f.size
			removed++
		}
	}
	return removed, nil
}
