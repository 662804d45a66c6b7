module github.com/podflow/podflow/nodeagent

go 1.26
