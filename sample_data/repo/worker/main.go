package main

import (
	"flag"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"
)

// Operation codes stored in the WAL.
const (
	OpSet    byte = 2
	OpDelete byte = 3
)

func main() {
	walPath := flag.String("wal", "kvstore.wal", "path of the write-ahead log")
	interval := flag.Duration("interval", 10*time.Minute, "time between compactions")
	minRatio := flag.Float64("min-ratio", 0.3, "compact only when at least this share of records goes away")
	flag.Parse()

	compactor := &Compactor{Source: *walPath, Destination: *walPath + ".compacted", MinRatio: *minRatio}
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM)
	ticker := time.NewTicker(*interval)
	defer ticker.Stop()

	for {
		select {
		case <-ticker.C:
			stats, err := compactor.Run()
			if err != nil {
				log.Printf("compaction failed: %v", err)
				continue
			}
			log.Printf("compacted %d -> %d records (%.0f%% removed) in %s",
				stats.RecordsIn, stats.RecordsOut, stats.Ratio()*100, stats.Duration)
		case sig := <-signals:
			log.Printf("received %s, exiting", sig)
			return
		}
	}
}
