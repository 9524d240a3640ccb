package main

import (
	"os"
	"path/filepath"
	"testing"
)

func TestAppendReplay(t *testing.T) {
	path := filepath.Join(t.TempDir(), "test.wal")
	wal, err := OpenWAL(path)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if err := wal.Append(Record{Op: OpSet, Key: []byte{byte('a' + i)}, Value: []byte("v")}); err != nil {
			t.Fatal(err)
		}
	}
	if err := wal.Close(); err != nil {
		t.Fatal(err)
	}
	var keys []string
	n, err := Replay(path, func(r Record) error { keys = append(keys, string(r.Key)); return nil })
	if err != nil || n != 3 {
		t.Fatalf("replayed %d records, err %v", n, err)
	}
	if keys[2] != "c" {
		t.Fatalf("unexpected order %v", keys)
	}
}

func TestTornTailIsIgnored(t *testing.T) {
	path := filepath.Join(t.TempDir(), "torn.wal")
	wal, _ := OpenWAL(path)
	wal.Append(Record{Op: OpSet, Key: []byte("k"), Value: []byte("value")})
	wal.Close()
	data, _ := os.ReadFile(path)
	os.WriteFile(path, data[:len(data)-2], 0o644)
	n, err := Replay(path, func(Record) error { return nil })
	if err != nil || n != 0 {
		t.Fatalf("expected 0 records and no error, got %d %v", n, err)
	}
}
