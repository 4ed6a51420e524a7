package dm

import (
	"reflect"
	"strings"
	"testing"
)

// dumped is what cache_dump 0.9.0 printed for a restored device (hints included).
const dumped = `<superblock uuid="" block_size="128" nr_cache_blocks="16" policy="smq" hint_width="4">
  <mappings>
    <mapping cache_block="0" origin_block="5" dirty="false"/>
    <mapping cache_block="1" origin_block="6" dirty="true"/>
  </mappings>
  <hints>
    <hint cache_block="0" data="AAAAAA=="/>
    <hint cache_block="1" data="AAAAAA=="/>
  </hints>
</superblock>`

func TestUnmarshalCacheXMLReadsCacheDump(t *testing.T) {
	md, err := UnmarshalCacheXML([]byte(dumped))
	if err != nil {
		t.Fatal(err)
	}
	want := CacheMetadata{BlockSectors: 128, CacheBlocks: 16, Policy: "smq",
		Mappings: []Mapping{{Cache: 0, Origin: 5}, {Cache: 1, Origin: 6, Dirty: true}}}
	if !reflect.DeepEqual(md, want) {
		t.Fatalf("got %+v, want %+v", md, want)
	}
}

func TestMarshalCacheXMLRoundTrips(t *testing.T) {
	md := CacheMetadata{BlockSectors: 128, CacheBlocks: 16, Policy: "smq", Mappings: []Mapping{{Cache: 0, Origin: 5}, {Cache: 1, Origin: 6}}}
	data, err := MarshalCacheXML(md)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`block_size="128"`, `nr_cache_blocks="16"`, `hint_width="4"`, `<mapping cache_block="1" origin_block="6" dirty="false"></mapping>`} {
		if !strings.Contains(string(data), want) {
			t.Errorf("XML lacks %s:\n%s", want, data)
		}
	}
	back, err := UnmarshalCacheXML(data)
	if err != nil || !reflect.DeepEqual(back, md) {
		t.Fatalf("round trip: %+v, %v; want %+v", back, err, md)
	}
}

func TestMarshalCacheXMLRefusesImpossibleMappings(t *testing.T) {
	for name, md := range map[string]CacheMetadata{
		"cache block past the end": {BlockSectors: 128, CacheBlocks: 2, Policy: "smq", Mappings: []Mapping{{Cache: 2, Origin: 0}}},
		"cache block twice":        {BlockSectors: 128, CacheBlocks: 2, Policy: "smq", Mappings: []Mapping{{Cache: 0, Origin: 0}, {Cache: 0, Origin: 1}}},
		"bad block size":           {BlockSectors: 100, CacheBlocks: 2, Policy: "smq"},
	} {
		if _, err := MarshalCacheXML(md); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
