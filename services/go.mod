module github.com/podflow/podflow/services

go 1.26
