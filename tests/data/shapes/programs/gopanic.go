package main

import "fmt"

func main() {
	shards := map[string]int{"train-00000": 1200}
	for step := 0; step < 3; step++ {
		fmt.Printf("step %d\n", step)
	}
	var index map[string]int
	index["train-00001"] = shards["train-00000"]
}
