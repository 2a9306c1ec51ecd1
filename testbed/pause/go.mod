module trainer-operator/pause

go 1.22
