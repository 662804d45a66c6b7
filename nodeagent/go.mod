module github.com/podflow/podflow/nodeagent

go 1.26.0

replace github.com/podflow/podflow/proto => ../proto

replace github.com/podflow/podflow/bus => ../bus

replace github.com/podflow/podflow/raftstore => ../raftstore

replace github.com/podflow/podflow/services => ../services

require (
	github.com/podflow/podflow/proto v0.0.0
	go.uber.org/goleak v1.3.0
	google.golang.org/protobuf v1.36.12
	k8s.io/apimachinery v0.37.2
)

require (
	github.com/fxamacker/cbor/v2 v2.9.1 // indirect
	github.com/x448/float16 v0.8.4 // indirect
	gopkg.in/inf.v0 v0.9.1 // indirect
	sigs.k8s.io/json v0.0.0-20250730193827-2d320260d730 // indirect
)
