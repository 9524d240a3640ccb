package main

import (
	"fmt"
	"os"
	"sort"
	"time"
)

// Compactor rewrites a WAL so that only the last write of each key survives.
type Compactor struct {
	Source      string
	Destination string
	MinRatio    float64
	Clock       func() time.Time
	stats       CompactionStats
}

// CompactionStats says what one compaction did.
type CompactionStats struct {
	RecordsIn  int
	RecordsOut int
	KeysLive   int
	Deletes    int
	Duration   time.Duration
}

// Ratio is the share of records that the compaction removed.
func (s CompactionStats) Ratio() float64 {
	if s.RecordsIn == 0 {
		return 0
	}
	return 1 - float64(s.RecordsOut)/float64(s.RecordsIn)
}

// Run compacts Source into Destination, then renames Destination over Source when the
// compaction removed at least MinRatio of the records. It never leaves a half-written log
// under the Source name: the new log is written and synced before the rename.
func (c *Compactor) Run() (CompactionStats, error) {
	clock := c.Clock
	if clock == nil {
		clock = time.Now
	}
	started := clock()
	latest := make(map[string]Record)
	order := make(map[string]int)
	seq := 0
	count, err := Replay(c.Source, func(rec Record) error {
		key := string(rec.Key)
		latest[key] = Record{Op: rec.Op, Key: append([]byte(nil), rec.Key...), Value: append([]byte(nil), rec.Value...)}
		order[key] = seq
		seq++
		return nil
	})
	if err != nil {
		return c.stats, fmt.Errorf("compact: replay: %w", err)
	}
	c.stats.RecordsIn = count

	keys := make([]string, 0, len(latest))
	for key, rec := range latest {
		if rec.Op == OpDelete {
			c.stats.Deletes++
			continue
		}
		keys = append(keys, key)
	}
	// Keep the original write order so a replay sees the same history, minus overwrites.
	sort.Slice(keys, func(i, j int) bool { return order[keys[i]] < order[keys[j]] })

	tmp := c.Destination + ".tmp"
	out, err := OpenWAL(tmp)
	if err != nil {
		return c.stats, err
	}
	for _, key := range keys {
		if err := out.Append(latest[key]); err != nil {
			out.Close()
			os.Remove(tmp)
			return c.stats, err
		}
	}
	if err := out.Close(); err != nil {
		os.Remove(tmp)
		return c.stats, err
	}
	c.stats.RecordsOut = len(keys)
	c.stats.KeysLive = len(keys)
	c.stats.Duration = clock().Sub(started)
	if c.stats.Ratio() < c.MinRatio {
		os.Remove(tmp)
		return c.stats, nil
	}
	if err := os.Rename(tmp, c.Source); err != nil {
		return c.stats, fmt.Errorf("compact: rename: %w", err)
	}
	return c.stats, nil
}
