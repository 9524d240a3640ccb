module example.com/kvstore/worker

go 1.22
