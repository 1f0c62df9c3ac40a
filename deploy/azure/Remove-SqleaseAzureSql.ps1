<#
.SYNOPSIS
Removes everything New-SqleaseAzureSql.ps1 created: the resource group and
all in it (server, database, identity, firewall rules).

.NOTES
Not run here (no PowerShell, no Azure on this machine). It deletes the
whole resource group: check the name.
#>
param(
    [Parameter(Mandatory)] [string] $SubscriptionId,
    [string] $ResourceGroup = 'cristp-reltaskexec'
)
$ErrorActionPreference = 'Stop'
Set-AzContext -SubscriptionId $SubscriptionId | Out-Null
Remove-AzResourceGroup -Name $ResourceGroup -Force | Out-Null
Write-Output "Removed resource group $ResourceGroup."
