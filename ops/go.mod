module github.com/podflow/podflow/ops

go 1.26.0

require (
	github.com/google/go-containerregistry v0.22.1
	github.com/spf13/cobra v1.10.2
	go.uber.org/goleak v1.3.0
)

require (
	github.com/inconshreveable/mousetrap v1.1.0 // indirect
	github.com/prometheus/client_golang v1.25.0 // indirect
	github.com/spf13/pflag v1.0.10 // indirect
)

replace github.com/podflow/podflow/proto => ../proto

replace github.com/podflow/podflow/bus => ../bus

replace github.com/podflow/podflow/raftstore => ../raftstore

replace github.com/podflow/podflow/services => ../services

replace github.com/podflow/podflow/nodeagent => ../nodeagent
