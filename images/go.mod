module github.com/podflow/podflow/images

go 1.26.0
