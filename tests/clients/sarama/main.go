// sarama-check: Shopify's sarama (the Go client Debian packages) against a broker, configured
// for one Kafka version. It produces records, reads them back, commits an offset per partition
// through a consumer group's offset manager, reads the commits back, and asks for the oldest
// and newest offsets (ListOffsets); it prints what it saw as JSON for the Python test to check.
//
//	sarama-check -bootstrap 127.0.0.1:9092 -topic t -partitions 2 -group g -version 0.10.0.0 \
//	    -records 200 -codec gzip
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/Shopify/sarama"
)

type record struct {
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
	Key       string `json:"key"`
	Value     string `json:"value"`
	Timestamp int64  `json:"timestamp_ms"`
}

type report struct {
	Produced  []record        `json:"produced"`
	Consumed  []record        `json:"consumed"`
	Committed map[int32]int64 `json:"committed"`
	Oldest    map[int32]int64 `json:"oldest"`
	Newest    map[int32]int64 `json:"newest"`
}

var codecs = map[string]sarama.CompressionCodec{
	"none": sarama.CompressionNone, "gzip": sarama.CompressionGZIP,
	"snappy": sarama.CompressionSnappy, "lz4": sarama.CompressionLZ4,
	"zstd": sarama.CompressionZSTD,
}

func fail(what string, err error) {
	fmt.Fprintf(os.Stderr, "sarama-check: %s: %v\n", what, err)
	os.Exit(1)
}

func main() {
	bootstrap := flag.String("bootstrap", "127.0.0.1:9092", "broker address")
	topic := flag.String("topic", "sarama", "topic (it must exist)")
	partitions := flag.Int("partitions", 1, "partitions of the topic")
	group := flag.String("group", "sarama-group", "group whose offsets are committed")
	version := flag.String("version", "2.0.0", "Kafka version sarama is told the broker runs (0.10.0.0, 2.0.0)")
	records := flag.Int("records", 100, "records to produce (0: only read)")
	read := flag.Int("read", -1, "records to read from the start of each partition, in all (-1: as many as produced)")
	codec := flag.String("codec", "none", "none, gzip, snappy, lz4 or zstd")
	flag.Parse()

	config := sarama.NewConfig()
	v, err := sarama.ParseKafkaVersion(*version)
	if err != nil {
		fail("version", err)
	}
	config.Version = v
	config.ClientID = "sarama-check"
	config.Producer.Return.Successes = true
	config.Producer.RequiredAcks = sarama.WaitForAll
	config.Producer.Partitioner = sarama.NewManualPartitioner
	config.Producer.Compression = codecs[*codec]
	config.Producer.Flush.Messages = 20 // several records to a message set
	config.Producer.Flush.Frequency = 10 * time.Millisecond
	config.Consumer.Offsets.CommitInterval = 100 * time.Millisecond
	config.Metadata.Retry.Backoff = 200 * time.Millisecond

	client, err := sarama.NewClient([]string{*bootstrap}, config)
	if err != nil {
		fail("client", err)
	}
	defer client.Close()
	out := report{Committed: map[int32]int64{}, Oldest: map[int32]int64{}, Newest: map[int32]int64{}}

	if *records > 0 {
		producer, err := sarama.NewAsyncProducerFromClient(client)
		if err != nil {
			fail("producer", err)
		}
		for i := 0; i < *records; i++ {
			producer.Input() <- &sarama.ProducerMessage{
				Topic: *topic, Partition: int32(i % *partitions),
				Key:   sarama.StringEncoder(fmt.Sprintf("k-%d", i)),
				Value: sarama.StringEncoder(fmt.Sprintf("v-%d-%0*d", i, i%40, 0)),
			}
		}
		for i := 0; i < *records; i++ {
			select {
			case m := <-producer.Successes():
				k, _ := m.Key.Encode()
				val, _ := m.Value.Encode()
				out.Produced = append(out.Produced, record{m.Partition, m.Offset, string(k), string(val), m.Timestamp.UnixNano() / 1e6})
			case e := <-producer.Errors():
				fail("produce", e.Err)
			}
		}
		producer.Close()
	}

	want := *read
	if want < 0 {
		want = *records
	}
	consumer, err := sarama.NewConsumerFromClient(client)
	if err != nil {
		fail("consumer", err)
	}
	next := map[int32]int64{}
	for p := int32(0); p < int32(*partitions); p++ {
		pc, err := consumer.ConsumePartition(*topic, p, sarama.OffsetOldest)
		if err != nil {
			fail("consume partition", err)
		}
		newest, err := client.GetOffset(*topic, p, sarama.OffsetNewest)
		if err != nil {
			fail("newest offset", err)
		}
		oldest, err := client.GetOffset(*topic, p, sarama.OffsetOldest)
		if err != nil {
			fail("oldest offset", err)
		}
		out.Newest[p], out.Oldest[p] = newest, oldest
		next[p] = oldest
		deadline := time.After(30 * time.Second)
	reading:
		for next[p] < newest {
			select {
			case m := <-pc.Messages():
				out.Consumed = append(out.Consumed, record{m.Partition, m.Offset, string(m.Key), string(m.Value), m.Timestamp.UnixNano() / 1e6})
				next[p] = m.Offset + 1
			case e := <-pc.Errors():
				fail("consume", e.Err)
			case <-deadline:
				break reading
			}
		}
		pc.Close()
	}
	consumer.Close()
	if len(out.Consumed) != want {
		fail("consume", fmt.Errorf("read %d records, wanted %d", len(out.Consumed), want))
	}

	offsets, err := sarama.NewOffsetManagerFromClient(*group, client)
	if err != nil {
		fail("offset manager", err)
	}
	for p := int32(0); p < int32(*partitions); p++ {
		pom, err := offsets.ManagePartition(*topic, p)
		if err != nil {
			fail("manage partition", err)
		}
		pom.MarkOffset(next[p], "sarama")
		pom.Close()
	}
	offsets.Close() // commits what is marked
	again, err := sarama.NewOffsetManagerFromClient(*group, client)
	if err != nil {
		fail("offset manager", err)
	}
	for p := int32(0); p < int32(*partitions); p++ {
		pom, err := again.ManagePartition(*topic, p)
		if err != nil {
			fail("manage partition", err)
		}
		out.Committed[p], _ = pom.NextOffset()
		pom.Close()
	}
	again.Close()
	json.NewEncoder(os.Stdout).Encode(out)
}
