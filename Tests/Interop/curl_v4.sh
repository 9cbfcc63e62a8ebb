#!/usr/bin/env bash
# Drives the reference service's V4 root with curl: metadata, reads with query options,
# get by key, navigation, create/update/delete, a batch with a change set, a function import.
# Usage: curl_v4.sh SERVICE_URL   (prints "N passed, N failed")
set -u
root="$1"
passed=0
failed=0

check() { # name, expected, actual
  if [[ "$3" == *"$2"* ]]; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAIL $1: expected '$2' in: ${3:0:300}" >&2; fi
}
status() { curl -s -o /dev/null -w '%{http_code}' "$@"; }

check metadata '<EntityType Name="SalesOrder">' "$(curl -s "${root}\$metadata")"
check filter '"OrderID":"SO17"' "$(curl -s -G "${root}SalesOrders" --data-urlencode "\$filter=PartnerID eq 'BP1'" --data-urlencode '$orderby=OrderID desc' --data-urlencode '$top=3' --data-urlencode '$skip=1' --data-urlencode '$select=OrderID')"
check count '"@odata.count":10' "$(curl -s -G "${root}SalesOrders" --data-urlencode "\$filter=PartnerID eq 'BP1'" --data-urlencode '$count=true' --data-urlencode '$top=1')"
check expand '"Items":[{' "$(curl -s -G "${root}SalesOrders('SO1')" --data-urlencode '$expand=Items')"
check key '"CompanyName":"Company 2"' "$(curl -s "${root}BusinessPartners('BP2')")"
check navigation '"PartnerID":"BP2"' "$(curl -s "${root}BusinessPartners('BP2')/Contacts")"
check create 201 "$(status -X POST -H 'Content-Type: application/json' -d '{"CategoryID":"CU1","Name":"From curl"}' "${root}ProductCategories")"
check unconditional 428 "$(status -X PATCH -H 'Content-Type: application/json' -d '{"Name":"x"}' "${root}ProductCategories('CU1')")"
check update 204 "$(status -X PATCH -H 'Content-Type: application/json' -H 'If-Match: *' -d '{"Name":"Renamed by curl"}' "${root}ProductCategories('CU1')")"
check updated '"Name":"Renamed by curl"' "$(curl -s "${root}ProductCategories('CU1')")"
check delete 204 "$(status -X DELETE -H 'If-Match: *' "${root}ProductCategories('CU1')")"
check deleted 404 "$(status "${root}ProductCategories('CU1')")"
batch=$(printf -- '--b\r\nContent-Type: multipart/mixed; boundary=c\r\n\r\n--c\r\nContent-Type: application/http\r\nContent-ID: 1\r\n\r\nPOST ProductCategories HTTP/1.1\r\nContent-Type: application/json\r\n\r\n{"CategoryID":"CU2","Name":"Batch"}\r\n--c--\r\n--b--\r\n')
check batch 'HTTP/1.1 201 Created' "$(curl -s -X POST -H 'Content-Type: multipart/mixed; boundary=b' --data-binary "$batch" "${root}\$batch")"
check batched '"CategoryID":"CU2"' "$(curl -s "${root}ProductCategories('CU2')")"
check function '"CategoryID":"C3"' "$(curl -s "${root}GetProductsByCategory(CategoryID='C3')")"
check malformed 400 "$(status "${root}Products?%24filter=Price%20gt")"

echo "curl: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
