module github.com/podflow/podflow/ops

go 1.26.0

require (
	github.com/google/go-containerregistry v0.22.1
	github.com/spf13/cobra v1.10.2
	go.uber.org/goleak v1.3.0
)

require github.com/anishathalye/porcupine v1.3.1 // indirect

require (
	github.com/chromedp/cdproto v0.0.0-20250724212937-08a3db8b4327 // indirect
	github.com/chromedp/chromedp v0.14.2
	github.com/chromedp/sysutil v1.1.0 // indirect
	github.com/go-json-experiment/json v0.0.0-20260213210345-44df1a37e875 // indirect
	github.com/gobwas/httphead v0.1.0 // indirect
	github.com/gobwas/pool v0.2.1 // indirect
	github.com/gobwas/ws v1.4.0 // indirect
	github.com/inconshreveable/mousetrap v1.1.0 // indirect
	github.com/prometheus/client_golang v1.25.0 // indirect
	github.com/spf13/pflag v1.0.10 // indirect
	golang.org/x/sys v0.48.0 // indirect
)

replace github.com/podflow/podflow/proto => ../proto

replace github.com/podflow/podflow/bus => ../bus

replace github.com/podflow/podflow/raftstore => ../raftstore

replace github.com/podflow/podflow/services => ../services

replace github.com/podflow/podflow/nodeagent => ../nodeagent
