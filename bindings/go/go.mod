module github.com/cairn-db/cairn/bindings/go

go 1.23
