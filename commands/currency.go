package commands

import "strings"

// currencies are the alphabetic codes of ISO 4217 (list one) for the
// currencies in use at the start of 2026, one per country or monetary
// union: the codes a wallet can hold. Left out on purpose:
//   - fund codes, which are units of account, not money a wallet holds
//     (BOV, CHE, CHW, CLF, COU, MXV, USN, UYI, UYW);
//   - the X codes that are not a currency: metals (XAG, XAU, XPD, XPT),
//     units (XBA to XBD, XDR, XSU, XUA), testing (XTS) and none (XXX);
//   - withdrawn codes, such as ANG (replaced by XCG in 2025), BGN (by EUR
//     in 2026), CUC, HRK, SLL and ZWL.
//
// It is a snapshot: a code that ISO 4217 adds is refused until it is added
// here.
const currencies = `
AED AFN ALL AMD AOA ARS AUD AWG AZN BAM BBD BDT BHD BIF BMD BND BOB BRL BSD
BTN BWP BYN BZD CAD CDF CHF CLP CNY COP CRC CUP CVE CZK DJF DKK DOP DZD EGP
ERN ETB EUR FJD FKP GBP GEL GHS GIP GMD GNF GTQ GYD HKD HNL HTG HUF IDR ILS
INR IQD IRR ISK JMD JOD JPY KES KGS KHR KMF KPW KRW KWD KYD KZT LAK LBP LKR
LRD LSL LYD MAD MDL MGA MKD MMK MNT MOP MRU MUR MVR MWK MXN MYR MZN NAD NGN
NIO NOK NPR NZD OMR PAB PEN PGK PHP PKR PLN PYG QAR RON RSD RUB RWF SAR SBD
SCR SDG SEK SGD SHP SLE SOS SRD SSP STN SVC SYP SZL THB TJS TMT TND TOP TRY
TTD TWD TZS UAH UGX USD UYU UZS VED VES VND VUV WST XAF XCD XCG XOF XPF YER
ZAR ZMW ZWG
`

var currencySet = func() map[string]bool {
	m := make(map[string]bool, 160)
	for _, c := range strings.Fields(currencies) {
		m[c] = true
	}
	return m
}()

// isCurrency reports whether code is the ISO 4217 code of a currency in
// use, such as "EUR" (upper case, exactly): the codes OpenTransfer and the
// example's wallets accept. Fund codes, metals and withdrawn codes are
// not (see the list in currency.go).
func isCurrency(code string) bool { return currencySet[code] }
