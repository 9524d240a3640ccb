package main

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"sync"
)

// ErrCorrupt is returned when a record's checksum does not match its bytes.
var ErrCorrupt = errors.New("wal: corrupt record")

// Record is one logged mutation.
type Record struct {
	Op    byte
	Key   []byte
	Value []byte
}

// WAL is an append-only write-ahead log: each record is
// [crc32 (4) | key length (2) | value length (4) | op (1) | key | value].
type WAL struct {
	mu      sync.Mutex
	file    *os.File
	writer  *bufio.Writer
	records int64
	bytes   int64
	path    string
}

// OpenWAL opens (or creates) the log at path for appending.
func OpenWAL(path string) (*WAL, error) {
	file, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("wal: open %s: %w", path, err)
	}
	info, err := file.Stat()
	if err != nil {
		file.Close()
		return nil, err
	}
	return &WAL{file: file, writer: bufio.NewWriterSize(file, 1<<16), bytes: info.Size(), path: path}, nil
}

// Append writes one record; it is durable only after Sync.
func (w *WAL) Append(rec Record) error {
	if len(rec.Key) > 0xffff {
		return fmt.Errorf("wal: key of %d bytes is too long", len(rec.Key))
	}
	header := make([]byte, 11)
	binary.BigEndian.PutUint16(header[4:6], uint16(len(rec.Key)))
	binary.BigEndian.PutUint32(header[6:10], uint32(len(rec.Value)))
	header[10] = rec.Op
	crc := crc32.NewIEEE()
	crc.Write(header[4:])
	crc.Write(rec.Key)
	crc.Write(rec.Value)
	binary.BigEndian.PutUint32(header[0:4], crc.Sum32())

	w.mu.Lock()
	defer w.mu.Unlock()
	for _, part := range [][]byte{header, rec.Key, rec.Value} {
		if _, err := w.writer.Write(part); err != nil {
			return fmt.Errorf("wal: append: %w", err)
		}
	}
	w.records++
	w.bytes += int64(len(header) + len(rec.Key) + len(rec.Value))
	return nil
}

// Sync flushes buffered records and fsyncs the file.
func (w *WAL) Sync() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.writer.Flush(); err != nil {
		return err
	}
	return w.file.Sync()
}

// Close syncs and closes the log.
func (w *WAL) Close() error {
	if err := w.Sync(); err != nil {
		return err
	}
	return w.file.Close()
}

// Replay reads every record from the start of the log and calls fn for each. A torn
// record at the end (a crash mid-append) is ignored; corruption before the end is an error.
func Replay(path string, fn func(Record) error) (int, error) {
	file, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer file.Close()
	reader := bufio.NewReader(file)
	count := 0
	header := make([]byte, 11)
	for {
		if _, err := io.ReadFull(reader, header); err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				return count, nil
			}
			return count, err
		}
		keyLen := binary.BigEndian.Uint16(header[4:6])
		valueLen := binary.BigEndian.Uint32(header[6:10])
		body := make([]byte, int(keyLen)+int(valueLen))
		if _, err := io.ReadFull(reader, body); err != nil {
			if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
				return count, nil
			}
			return count, err
		}
		crc := crc32.NewIEEE()
		crc.Write(header[4:])
		crc.Write(body)
		if crc.Sum32() != binary.BigEndian.Uint32(header[0:4]) {
			return count, fmt.Errorf("%w at record %d", ErrCorrupt, count)
		}
		rec := Record{Op: header[10], Key: body[:keyLen], Value: body[keyLen:]}
		if err := fn(rec); err != nil {
			return count, err
		}
		count++
	}
}
