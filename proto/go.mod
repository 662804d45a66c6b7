module github.com/podflow/podflow/proto

go 1.26

require google.golang.org/protobuf v1.36.12
