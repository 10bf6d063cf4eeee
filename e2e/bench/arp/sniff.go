//go:build linux

package main

import (
	"encoding/binary"
	"fmt"
	"net"
	"time"

	"github.com/caplb/caplb/e2e/lab/arplab"
	"github.com/mdlayher/packet"
)

// sniff prints, from the client's interface, every TCP reset and every ARP
// packet about the VIP, with the sender's MAC: enough to tell which node's
// kernel did what around a fault (-v).
func sniff(c *arplab.Cluster, macs map[string]string) error {
	var conn *packet.Conn
	err := c.Client.Do(func() error {
		ifi, err := net.InterfaceByName("eth0")
		if err != nil {
			return err
		}
		conn, err = packet.Listen(ifi, packet.Raw, 0x0003, nil) // ETH_P_ALL
		return err
	})
	if err != nil {
		return err
	}
	go func() {
		buf := make([]byte, 2048)
		for {
			n, _, err := conn.ReadFrom(buf)
			if err != nil {
				return
			}
			f := buf[:n]
			if len(f) < 14 {
				continue
			}
			src := net.HardwareAddr(f[6:12]).String()
			who := macs[src]
			if who == "" {
				who = src
			}
			switch binary.BigEndian.Uint16(f[12:14]) {
			case 0x0806:
				if len(f) >= 42 {
					fmt.Printf("      %s ARP op=%d from %s: %s is-at %s\n", time.Now().Format("15:04:05.000000"), binary.BigEndian.Uint16(f[20:22]),
						who, net.IP(f[28:32]), net.HardwareAddr(f[22:28]))
				}
			case 0x0800:
				ihl := int(f[14]&0x0f) * 4
				if len(f) < 14+ihl+14 || f[23] != 6 {
					continue
				}
				tcp := f[14+ihl:]
				if tcp[13]&0x04 != 0 {
					fmt.Printf("      %s TCP RST from %s %s:%d -> port %d\n", time.Now().Format("15:04:05.000000"), who,
						net.IP(f[26:30]), binary.BigEndian.Uint16(tcp[0:2]), binary.BigEndian.Uint16(tcp[2:4]))
				}
			}
		}
	}()
	return nil
}
